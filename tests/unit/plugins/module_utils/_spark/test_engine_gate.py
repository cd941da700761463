"""The engine gate (_spark/engine_gate.py and the script roles/ds4_firewall/files/ds4-engine-gate):
the gateways admitted to the engine's port only while ds4.service's own engine holds it.

Canned /proc of a Spark: the engine (pid 200, uid 110, cgroup ds4.service) on 0.0.0.0:8000, and where asked
a stranger (pid 300, nobody) on the Spark's own address or in the engine's place; nft faked, recording
what it was given."""

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark import listener as ds4_listener
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_gate import (
    GateError,
    act,
    close_text,
    load_text,
    locked,
    open_text,
    proof,
    read_config,
)

ROOT = Path(__file__).resolve().parents[5]
ENGINE_UID = 110
NOBODY = 65534
CONFIG = {
    "table": "ds4_engine",
    "rules": "/etc/ds4-engine.nft",
    "unit": "ds4.service",
    "user": "ds4",
    "host": "0.0.0.0",
    "port": 8000,
    "admit": True,
    "v4": ["10.89.0.4", "10.0.0.0/24"],
    "v6": ["fd00::4"],
}
HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
TAIL = " 1 0000000015964c2d 100 0 0 10 0\n"
MID = " 00000000:00000000 00:00000000 00000000 "
ENGINE_SOCKET = "   0: 00000000:1F40 00000000:0000 0A" + MID + "  110        0 41000" + TAIL
# A stranger on the Spark's own address (10.89.0.2:8000), beside the engine on the wildcard.
STRANGER_BESIDE = "   1: 0200590A:1F40 00000000:0000 0A" + MID + "65534        0 27621" + TAIL
# The stranger alone, on the wildcard, while the engine is stopped.
STRANGER_ALONE = "   0: 00000000:1F40 00000000:0000 0A" + MID + "65534        0 27621" + TAIL
ENGINE_CGROUP = "0::/system.slice/ds4.service\n"
# A stranger IPv6-only on [::]:8000, beside the engine on 0.0.0.0 (an IPv6 socket that took IPv4 too could
# not have bound beside it).
STRANGER_V6 = "   0: " + "0" * 32 + ":1F40 " + "0" * 32 + ":0000 0A" + MID + "65534        0 27621" + TAIL


def fake_host(tmp_path, tcp, holders=None, cgroups=None, tcp6=None):
    """A /proc with net/tcp (and net/tcp6) as given; processes 200 (the engine) and 300 (the stranger)
    holding the sockets of `holders` ({pid: [inodes]}), in `cgroups` ({pid: text})."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(HEADER + tcp)
    if tcp6 is not None:
        (proc / "net" / "tcp6").write_text(HEADER + tcp6)
    holders = {200: [41000], 300: [27621]} if holders is None else holders
    cgroups = cgroups or {200: ENGINE_CGROUP, 300: "0::/user.slice/user-65534.slice/session-3.scope\n"}
    for pid, comm in ((200, "ds4-server"), (300, "python3")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "cgroup").write_text(cgroups.get(pid, ""))
        for number, inode in enumerate(holders.get(pid, []), start=3):
            os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / str(number))
    return str(proc)


class Listener:
    """ds4_listener as the script hands it, reading descriptors directly: the canned /proc has no
    credentials for holders_as_owner's children."""

    def __getattr__(self, name):
        return getattr(ds4_listener, name)

    @staticmethod
    def holders_as_owner(inode, uid, proc_root):
        return ds4_listener.holders(inode, proc_root)


@pytest.fixture(autouse=True)
def users(monkeypatch):
    """The users as the Spark names them, whatever this host's passwd holds."""
    names = {NOBODY: f"nobody (uid {NOBODY})"}
    monkeypatch.setattr(ds4_listener, "user_name", lambda uid: names.get(uid, f"uid {uid}"))


class Nft:
    """A fake nft: what it was given, the table present or not, failures on demand."""

    def __init__(self, table=True, fail=False):
        self.table, self.fail, self.given = table, fail, []

    def __call__(self, args, text):
        self.given.append((args, text))
        if args[:2] == ["list", "table"]:
            return (0 if self.table else 1), "", "" if self.table else "Error: No such file or directory"
        if self.fail or not self.table:
            return 1, "", "Error: Could not process rule: No such file or directory"
        return 0, "", ""

    def texts(self):
        return [text for args, text in self.given if args == ["-f", "-"]]


# --- the settings ---


def test_the_settings_are_read_as_the_tasks_write_them():
    assert read_config(json.dumps(CONFIG)) == CONFIG


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"table": "ds4 engine; flush ruleset"}, "no nftables table name"),
        ({"rules": "ds4-engine.nft"}, "no absolute path"),
        ({"port": 0}, "no TCP port"),
        ({"port": True}, "no TCP port"),
        ({"admit": "yes"}, "not true or false"),
        ({"v4": ["fd00::1"]}, "not an IPv4 address"),
        ({"v6": ["10.0.0.1"]}, "not an IPv6 address"),
        ({"v4": ["10.0.0.1 } ; flush ruleset"]}, "no address or network"),
        ({"extra": 1}, "must have exactly"),
    ],
)
def test_bad_settings_are_refused_by_name(change, said):
    with pytest.raises(GateError, match=said):
        read_config(json.dumps(dict(CONFIG, **change)))


def test_settings_that_are_no_json_object_are_refused():
    with pytest.raises(GateError, match="no JSON"):
        read_config("[")
    with pytest.raises(GateError, match="no JSON object"):
        read_config("[]")


# --- what nft is given ---


def test_closing_empties_both_sets_and_opening_fills_them_in_one_transaction():
    assert close_text(CONFIG) == "flush set inet ds4_engine held_v4\nflush set inet ds4_engine held_v6\n"
    dual = dict(CONFIG, host="::")
    assert open_text(dual) == close_text(CONFIG) + (
        "add element inet ds4_engine held_v4 { 10.89.0.4, 10.0.0.0/24 }\n"
        "add element inet ds4_engine held_v6 { fd00::4 }\n"
    )
    # A family without an address adds nothing (an empty element list is no nft).
    assert "held_v6 {" not in open_text(dict(dual, v6=[]))


@pytest.mark.parametrize(
    ("host", "families"),
    [("0.0.0.0", ["held_v4"]), ("10.89.0.2", ["held_v4"]), ("::", ["held_v4", "held_v6"]),
     ("fd00::2", ["held_v6"])],
)  # fmt: skip
def test_the_gate_admits_only_the_families_the_engine_listens_in(host, families):
    """Issue 55, point 5: an engine on 0.0.0.0 is reached over IPv4 alone; a gateway's IPv6 packets to the
    port could only reach another user's IPv6 socket, so they are never admitted."""
    text = open_text(dict(CONFIG, host=host))
    assert [name for name in ("held_v4", "held_v6") if f"{name} {{" in text] == families


def test_a_stranger_ipv6_only_beside_an_ipv4_engine_keeps_no_engine_down(tmp_path):
    """Issue 55, point 5: nobody on [::]:8000 IPv6-only made the gate refuse at every start of the engine on
    0.0.0.0, which stayed down until that user stopped. No gateway reaches that socket (the IPv6 set stays
    empty); a stranger in the engine's own family is still refused."""
    proc = fake_host(tmp_path, ENGINE_SOCKET, tcp6=STRANGER_V6)
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) is None
    assert proof(dict(CONFIG, host="::"), Listener(), ENGINE_UID, 200, proc) is not None


def test_loading_puts_the_rules_and_the_gate_in_one_text():
    rules = "table inet ds4_engine\ndelete table inet ds4_engine\n"
    assert load_text(CONFIG, rules, proven=False) == rules
    assert load_text(CONFIG, rules.rstrip("\n"), proven=True) == rules + open_text(CONFIG)


# --- the proof ---


def test_the_engines_own_listener_admits_the_gateways(tmp_path):
    proc = fake_host(tmp_path, ENGINE_SOCKET)
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) is None


def test_a_strangers_listener_in_the_engines_place_admits_nobody(tmp_path):
    proc = fake_host(tmp_path, STRANGER_ALONE, holders={300: [27621]})
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) == (
        "0.0.0.0:8000 is held by pid 300 (python3) of user nobody (uid 65534), not by the engine user uid 110"
    )


def test_a_stranger_on_the_sparks_own_address_beside_the_engine_admits_nobody(tmp_path):
    proc = fake_host(tmp_path, ENGINE_SOCKET + STRANGER_BESIDE)
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) == (
        "10.89.0.2:8000 is held by pid 300 (python3) of user nobody (uid 65534), not by the engine user"
    )


def test_no_engine_running_admits_nobody(tmp_path):
    proc = fake_host(tmp_path, ENGINE_SOCKET)
    assert proof(CONFIG, Listener(), ENGINE_UID, 0, proc) == "ds4.service runs no engine"


def test_nothing_listening_admits_nobody(tmp_path):
    proc = fake_host(tmp_path, "")
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) == "nothing listens on 0.0.0.0:8000"


def test_a_socket_of_the_engine_user_the_main_process_does_not_hold_admits_nobody(tmp_path):
    proc = fake_host(tmp_path, ENGINE_SOCKET, holders={300: [41000]})
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) == (
        "0.0.0.0:8000 is held by pid 300 (python3) of user uid 110, "
        "not by the engine (the unit's main process, pid 200)"
    )


def test_a_holder_outside_the_units_cgroup_admits_nobody(tmp_path):
    # The engine's socket passed to a process of the engine user's that runs elsewhere.
    proc = fake_host(tmp_path, ENGINE_SOCKET, holders={200: [41000], 300: [41000]})
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) == (
        "0.0.0.0:8000 is also held by pid 300 (python3) of user uid 110, outside ds4.service's cgroup"
    )
    same = {200: ENGINE_CGROUP, 300: ENGINE_CGROUP}
    proc = fake_host(tmp_path / "same", ENGINE_SOCKET, holders={200: [41000], 300: [41000]}, cgroups=same)
    assert proof(CONFIG, Listener(), ENGINE_UID, 200, proc) is None


def test_an_engine_on_loopback_admits_no_gateway(tmp_path):
    proc = fake_host(tmp_path, ENGINE_SOCKET)
    assert proof(dict(CONFIG, host="127.0.0.1", admit=False), Listener(), ENGINE_UID, 200, proc) == (
        "the engine listens on loopback alone (ds4_host 127.0.0.1): no gateway reaches it there"
    )


# --- the actions ---


def test_open_fills_the_sets_once_the_engine_is_proven():
    nft = Nft()
    said = act("open", CONFIG, nft, lambda: None)
    assert nft.texts() == [open_text(CONFIG)]
    assert said == "opened: the gateways reach port 8000, held by ds4.service's engine"


def test_open_refused_empties_the_sets_and_fails_naming_the_holder():
    nft = Nft()
    with pytest.raises(GateError, match="not opened: 0.0.0.0:8000 is held by pid 300"):
        act("open", CONFIG, nft, lambda: "0.0.0.0:8000 is held by pid 300 (python3) of user nobody")
    assert nft.texts() == [close_text(CONFIG)]


def test_open_refused_says_so_whether_the_sets_were_emptied_or_there_is_no_table():
    why = "ds4.service runs no engine"
    with pytest.raises(GateError) as refused:
        act("open", CONFIG, Nft(fail=True), lambda: why)
    assert str(refused.value) == (
        f"not opened ({why}), and the sets of inet ds4_engine could not be emptied:"
        " Error: Could not process rule: No such file or directory"
    )
    with pytest.raises(GateError) as refused:
        act("open", CONFIG, Nft(table=False), lambda: why)
    assert str(refused.value) == f"not opened: {why}"


def test_open_without_the_table_leaves_it_to_the_next_load():
    said = act("open", CONFIG, Nft(table=False), lambda: None)
    assert "no table inet ds4_engine; loading the firewall again proves the engine anew" in said


def test_close_without_the_table_is_no_failure_and_a_failed_flush_is():
    assert "no table inet ds4_engine" in act("close", CONFIG, Nft(table=False), lambda: "unused")
    with pytest.raises(GateError, match="could not be emptied"):
        act("close", CONFIG, Nft(fail=True), lambda: "unused")


def test_load_is_one_transaction_open_only_when_proven():
    nft = Nft()
    assert act("load", CONFIG, nft, lambda: None, "RULES\n").startswith("loaded inet ds4_engine, open")
    said = act("load", CONFIG, nft, lambda: "ds4.service runs no engine", "RULES\n")
    assert said == "loaded inet ds4_engine, closed: ds4.service runs no engine"
    assert nft.texts() == ["RULES\n" + open_text(CONFIG), "RULES\n"]
    with pytest.raises(GateError, match="could not be loaded"):
        act("load", CONFIG, Nft(fail=True), lambda: None, "RULES\n")


def test_an_unknown_action_is_refused():
    with pytest.raises(GateError, match="no such action"):
        act("ajar", CONFIG, Nft(), lambda: None)


# --- the lock ---


def test_the_lock_is_a_file_of_the_runners_alone(tmp_path):
    path = tmp_path / "gate.lock"
    with locked(str(path)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_lock_reached_through_a_link_or_open_to_others_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "link.lock").symlink_to(target)
    with pytest.raises(GateError, match="is a link: refused"), locked(str(tmp_path / "link.lock")):
        pass
    shared = tmp_path / "shared.lock"
    shared.write_text("")
    shared.chmod(0o644)
    with pytest.raises(GateError, match="mode 0644"), locked(str(shared)):
        pass


def test_a_second_holder_waits_and_a_wait_too_long_fails(tmp_path):
    path = str(tmp_path / "gate.lock")
    clock = iter(range(100))
    waiting = locked(path, wait=3, clock=lambda: next(clock), sleep=lambda _s: None)
    with locked(path), pytest.raises(GateError, match="held for more than 3 s"), waiting:
        pass
    order = []

    def second():
        with locked(path):
            order.append("second")

    with locked(path):
        other = threading.Thread(target=second)
        other.start()
        order.append("first")
    other.join(timeout=10)
    assert order == ["first", "second"]


# --- the script, as systemd runs it ---


@pytest.fixture
def installed(tmp_path):
    """ds4-engine-gate with its modules beside it, a fake nft on PATH that logs its input, the settings."""
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy2(ROOT / "roles/ds4_firewall/files/ds4-engine-gate", lib / "ds4-engine-gate")
    for name in ("engine_gate.py", "listener.py"):
        shutil.copy2(ROOT / "plugins/module_utils/_spark" / name, lib / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nft").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/nft.log\ncat >> {tmp_path}/nft.log\n')
    (bin_dir / "nft").chmod(0o755)
    config = tmp_path / "gate.json"
    config.write_text(json.dumps(dict(CONFIG, user="root")))
    return tmp_path


def gate(installed, action, mainpid):
    script = installed / "lib" / "ds4-engine-gate"
    options = ["--config", installed / "gate.json", "--lock", installed / "gate.lock"]
    options += ["--proc", installed / "proc"]
    return subprocess.run(
        [sys.executable, str(script), action, *map(str, options)],
        env=dict(os.environ, PATH=f"{installed / 'bin'}:{os.environ['PATH']}", MAINPID=str(mainpid)),
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_script_refuses_a_strangers_port_and_leaves_no_bytecode_beside_it(installed):
    fake_host(installed, STRANGER_ALONE, holders={300: [27621]})
    done = gate(installed, "open", 200)
    assert done.returncode == 1
    assert "ds4-engine-gate open: not opened: 0.0.0.0:8000 is held by" in done.stderr
    assert (installed / "nft.log").read_text() == "-f -\n" + close_text(CONFIG)
    assert not (installed / "lib" / "__pycache__").exists()


def test_the_script_closes_on_stop(installed):
    fake_host(installed, "")
    done = gate(installed, "close", 0)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("closed: no gateway reaches port 8000")
