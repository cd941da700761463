"""module_utils/_run/record.py and the module ds4_applied: the record of the last finished run, and whether
a Spark is still as it left it. Real files, links and directories in a temporary tree; the engine is a
loopback HTTP server; systemctl is the module's run_command, given its real output format."""

import json
import os

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._run import record as ds4_applied
from ansible_collections.ds4.fleet.plugins.module_utils._run.record import (
    AppliedError,
    difference,
    fingerprint,
    parse_unit_states,
    read_record,
    snapshot,
    user_state,
    write_record,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_applied as module
from local_http import Handler, local_http
from module_runner import run_module

SHOWN = "UnitFileState=enabled\nActiveState=active\n\nUnitFileState=disabled\nActiveState=inactive\n"


@pytest.fixture
def tree(tmp_path):
    """A small managed layout: a config tree, a release with a link to it, a weight file."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "ds4.env").write_text("DS4_CTX=524288\n")
    (tmp_path / "releases" / "v0.6.5").mkdir(parents=True)
    (tmp_path / "releases" / "v0.6.5" / "ds4-server").write_bytes(b"\x7fELF" * 100)
    os.symlink(tmp_path / "releases" / "v0.6.5", tmp_path / "current")
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "model.gguf").write_bytes(b"GGUF" * 1000)
    return tmp_path


def state_of(tree):
    return snapshot(
        [str(tree / "current"), str(tree / "releases" / "*"), str(tree / "gguf" / "*"), str(tree / "gone")],
        trees=[str(tree / "etc")],
        units={"ds4.service": ["enabled", "active"]},
    )


def test_a_snapshot_holds_links_directories_contents_and_what_is_missing(tree):
    files = state_of(tree)["files"]
    assert files[str(tree / "current")] == {"link": str(tree / "releases" / "v0.6.5")}
    assert files[str(tree / "releases" / "v0.6.5")]["dir"] is True
    env = files[str(tree / "etc" / "ds4.env")]
    assert env["size"] == 15 and len(env["sha256"]) == 64
    assert files[str(tree / "gone")] == {"missing": True}


def test_a_large_file_is_compared_by_size_time_and_inode_not_read(tree, monkeypatch):
    monkeypatch.setattr(ds4_applied, "HASH_LIMIT", 100)
    entry = state_of(tree)["files"][str(tree / "gguf" / "model.gguf")]
    assert "sha256" not in entry and entry["size"] == 4000 and entry["ino"] > 0


def test_the_same_spark_and_inputs_differ_in_nothing(tree):
    record = {"version": ds4_applied.RECORD_VERSION, "fingerprint": "f1", "state": state_of(tree)}
    assert difference(record, "f1", state_of(tree)) is None


@pytest.mark.parametrize(
    "drift, reason",
    [
        (lambda t: (t / "etc" / "ds4.env").write_text("DS4_DRIFTED=1\n"), "file {t}/etc/ds4.env"),
        (lambda t: (t / "etc" / "ds4.env").chmod(0o666), "file {t}/etc/ds4.env"),
        (lambda t: (t / "etc" / "extra.conf").write_text("x"), "file {t}/etc/extra.conf"),
        (lambda t: (t / "gguf" / "model.gguf").unlink(), "file {t}/gguf/model.gguf"),
        (lambda t: (t / "current").unlink(), "file {t}/current"),
        (lambda t: (t / "gone").write_text("x"), "file {t}/gone"),
    ],
)
def test_a_drifted_path_is_named(tree, drift, reason):
    record = {"version": ds4_applied.RECORD_VERSION, "fingerprint": "f1", "state": state_of(tree)}
    drift(tree)
    expected = reason.format(t=tree) + " changed since the last finished run"
    assert difference(record, "f1", state_of(tree)) == expected


def test_other_inputs_a_stopped_unit_a_changed_user_or_no_record_take_the_whole_run(tree):
    now = state_of(tree)
    record = {"version": ds4_applied.RECORD_VERSION, "fingerprint": "f1", "state": now}
    assert difference(None, "f1", now) == "no finished run is recorded on this Spark"
    changed = "the settings or the collection differ from the last finished run's"
    assert difference(record, "f2", now) == changed
    assert difference({**record, "version": 0}, "f1", now).startswith("the settings or the collection")
    stopped = {**now, "units": {"ds4.service": ["enabled", "failed"]}}
    assert difference(record, "f1", stopped) == "unit ds4.service changed since the last finished run"
    moved = {**now, "user": {"uid": 1}}
    assert difference({**record, "state": {**now, "user": {"uid": 2}}}, "f1", moved) == (
        "the service user changed since the last finished run"
    )


def test_systemctl_show_is_read_unit_by_unit_in_the_order_asked():
    assert parse_unit_states(["ds4.service", "ds4-watchdog.timer"], SHOWN) == {
        "ds4.service": ["enabled", "active"],
        "ds4-watchdog.timer": ["disabled", "inactive"],
    }
    with pytest.raises(AppliedError, match="systemctl showed 2 units for 3"):
        parse_unit_states(["a", "b", "c"], SHOWN)


def test_the_service_user_is_read_from_the_password_database():
    me = user_state("root")
    assert (me["uid"], me["home"]) == (0, "/root")
    assert user_state("no-such-user-ds4") == {"missing": True}


def test_a_record_is_written_root_only_read_back_and_never_through_a_link(tmp_path):
    path = tmp_path / "fleet" / "applied.json"
    write_record(str(path), "f1", {"files": {}})
    assert (path.parent.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)
    assert read_record(str(path))["fingerprint"] == "f1"
    path.write_text('{"version": 1, "finger')
    assert read_record(str(path)) is None, "a record cut short is no record"
    assert read_record(str(tmp_path / "none.json")) is None

    linked = tmp_path / "linked.json"
    linked.symlink_to(path)
    with pytest.raises(AppliedError, match="cannot read the run record"):
        read_record(str(linked))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "linkdir").symlink_to(elsewhere)
    with pytest.raises(AppliedError, match="must be a directory of .* alone"):
        write_record(str(tmp_path / "linkdir" / "applied.json"), "f1", {})
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open").chmod(0o755)
    with pytest.raises(AppliedError, match="not a link or anyone else's"):
        write_record(str(tmp_path / "open" / "applied.json"), "f1", {})
    assert list(elsewhere.iterdir()) == [] and list((tmp_path / "open").iterdir()) == []


def test_the_fingerprint_moves_with_a_setting_and_a_collection_file_not_with_bytecode(tmp_path):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    task = tmp_path / "roles" / "r" / "tasks" / "main.yml"
    task.write_text("- ansible.builtin.debug: {}\n")
    first = fingerprint({"ds4_port": 8000}, str(tmp_path))
    assert fingerprint({"ds4_port": 8000}, str(tmp_path)) == first
    assert fingerprint({"ds4_port": 8001}, str(tmp_path)) != first
    (tmp_path / "plugins" / "__pycache__").mkdir(parents=True)
    (tmp_path / "plugins" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert fingerprint({"ds4_port": 8000}, str(tmp_path)) == first
    task.write_text("- ansible.builtin.debug: {msg: new}\n")
    assert fingerprint({"ds4_port": 8000}, str(tmp_path)) != first


class Engine(Handler):
    def do_GET(self):
        self.answer(200, json.dumps({"server": {"requests_inflight": 0}}).encode(), "application/json")


def applied(tree, record, port, state="checked", check_mode=False, monkeypatch=None, secrets=None, **more):
    monkeypatch.setattr(module.AnsibleModule, "run_command", lambda self, cmd, **kw: (0, SHOWN, ""))
    args = {
        "state": state,
        "path": str(record),
        "fingerprint": "f1",
        "secrets": secrets or {},
        # Beside the record: never the host's /var/lib/ds4-fleet.
        "digest_key": str(record.parent / "digest.key"),
        "paths": [str(tree / "current"), str(tree / "gguf" / "*")],
        "trees": [str(tree / "etc")],
        "units": ["ds4.service", "ds4-watchdog.timer"],
        "port": port,
        "_ansible_check_mode": check_mode,
        **more,
    }
    return run_module(module, args)


def test_the_module_records_then_finds_nothing_to_change_then_drift_and_forgets(tree, tmp_path, monkeypatch):
    record = tmp_path / "state" / "applied.json"
    with local_http(Engine) as url:
        port = int(url.rsplit(":", 1)[1])
        rc, result = applied(tree, record, port, monkeypatch=monkeypatch)
        assert (rc, result["converged"], result["changed"]) == (0, False, False)
        assert result["reason"] == "no finished run is recorded on this Spark"

        applied(tree, record, port, state="recorded", monkeypatch=monkeypatch)
        rc, result = applied(tree, record, port, monkeypatch=monkeypatch)
        assert (rc, result["converged"], result["reason"]) == (0, True, None)

        (tree / "etc" / "ds4.env").write_text("DS4_DRIFTED=1\n")
        rc, result = applied(tree, record, port, check_mode=True, monkeypatch=monkeypatch)
        assert result["converged"] is False and record.exists(), "check mode removes nothing"
        rc, result = applied(tree, record, port, monkeypatch=monkeypatch)
        assert result["reason"] == f"file {tree}/etc/ds4.env changed since the last finished run"
        assert not record.exists(), "a record that no longer holds is removed before the whole run"


def test_a_changed_secret_takes_the_whole_run_and_the_record_holds_only_its_keyed_digest(
    tree, tmp_path, monkeypatch
):
    record = tmp_path / "state" / "applied.json"
    secrets = {"ds4_extra_env": {"PIN": "1234"}}
    with local_http(Engine) as url:
        port = int(url.rsplit(":", 1)[1])
        applied(tree, record, port, state="recorded", monkeypatch=monkeypatch, secrets=secrets)
        assert "1234" not in record.read_text() and "hmac-sha256:" in record.read_text()
        rc, result = applied(tree, record, port, monkeypatch=monkeypatch, secrets=secrets)
        assert (rc, result["converged"]) == (0, True), result
        rc, result = applied(
            tree, record, port, monkeypatch=monkeypatch, secrets={"ds4_extra_env": {"PIN": "9"}}
        )
        assert result["converged"] is False and "settings or the collection differ" in result["reason"], (
            result
        )


def test_an_engine_that_does_not_answer_takes_the_whole_run(tree, tmp_path, monkeypatch):
    record = tmp_path / "state" / "applied.json"
    with local_http(Engine) as url:
        port = int(url.rsplit(":", 1)[1])
    applied(tree, record, port, state="recorded", monkeypatch=monkeypatch)
    rc, result = applied(tree, record, port, monkeypatch=monkeypatch)
    assert result["converged"] is False and result["reason"].startswith("the engine does not answer: ")


def test_a_weak_secret_is_not_in_the_plain_fingerprint_and_moves_only_the_keyed_one(tmp_path):
    # A 4-digit ds4_extra_env value was recovered from the plain sha256 in a fraction of a second.
    from ansible_collections.ds4.fleet.plugins.module_utils._run.record import keyed_fingerprint

    (tmp_path / "galaxy.yml").write_text("name: fleet\n")
    names = {"ds4_extra_env"}
    settings = {"ds4_port": 8000, "ds4_engine_repo": "https://u:pw1@git.example/ds4.git"}

    def plain(pin, password="pw1"):
        values = dict(settings, ds4_extra_env={"PIN": pin})
        values["ds4_engine_repo"] = f"https://u:{password}@git.example/ds4.git"
        return fingerprint(values, str(tmp_path), names)

    assert plain("1234") == plain("9876") == plain("1234", password="other")
    assert plain("1234") != fingerprint(dict(settings, ds4_port=8001), str(tmp_path), names)
    key = b"k" * 32
    first = keyed_fingerprint(plain("1234"), {"ds4_extra_env": {"PIN": "1234"}}, key)
    assert first == keyed_fingerprint(plain("1234"), {"ds4_extra_env": {"PIN": "1234"}}, key)
    assert first != keyed_fingerprint(plain("1234"), {"ds4_extra_env": {"PIN": "9876"}}, key)
    assert "1234" not in first and first.split("+")[1].startswith("hmac-sha256:")


def test_the_spark_keys_every_secret_setting_of_its_roles():
    import yaml
    from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import SECRETS

    root = os.path.join(os.path.dirname(__file__), *[os.pardir] * 5)
    with open(os.path.join(root, "roles/ds4_service/vars/main.yml")) as handle:
        secrets = yaml.safe_load(handle)["_ds4_applied_secrets"]
    no_log = set()
    for role in ("ds4_common", "ds4_preflight", "ds4_engine", "ds4_weights", "ds4_service", "ds4_activate"):
        with open(os.path.join(root, "roles", role, "meta/argument_specs.yml")) as handle:
            for spec in yaml.safe_load(handle)["argument_specs"].values():
                no_log |= {name for name, option in spec.get("options", {}).items() if option.get("no_log")}
    assert set(secrets) == (SECRETS | no_log) - {"ds4_gateway_api_keys"}
    assert all(value == "{{ " + name + " }}" for name, value in secrets.items())


def test_a_pairs_worker_which_serves_no_http_is_judged_by_its_units_alone(tree, tmp_path, monkeypatch):
    record = tmp_path / "state" / "applied.json"
    with local_http(Engine) as url:
        port = int(url.rsplit(":", 1)[1])
    # Nothing listens on the port now, as on a worker, whose engine connects to its coordinator.
    applied(tree, record, port, state="recorded", monkeypatch=monkeypatch, engine_answers=False)
    rc, result = applied(tree, record, port, monkeypatch=monkeypatch, engine_answers=False)
    assert (rc, result["converged"], result["reason"]) == (0, True, None), result
