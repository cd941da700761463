"""The steps of a removal (_fleet/remover.py), run against a recorded command line rather than a host."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._fleet import remover as remover_module
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import FIREWALL_TABLE, RemoveError
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remover import Remover, lines


class Host:
    """Records each command; answers from ANSWERS (argv prefix -> (rc, out, err)), else success."""

    def __init__(self, answers=None):
        self.calls, self.answers = [], answers or {}

    def run_command(self, argv, environ_update=None):
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return answer
        return 0, "", ""

    @staticmethod
    def get_bin_path(name):
        return f"/usr/sbin/{name}"


def test_a_failed_command_is_named_with_its_exit_and_its_words():
    host = Host({("userdel",): (8, "", "userdel: user ds4 is currently used by process 42\n")})
    steps = Remover(host.run_command, host.get_bin_path, check=False)
    with pytest.raises(RemoveError, match=r"^userdel ds4 failed \(exit 8\): userdel: user ds4 is currently"):
        steps.run(["userdel", "ds4"], "userdel ds4")
    assert steps.run(["nft", "list"], "nft list", ok=(0, 1)) == (0, "")


def test_units_are_stopped_only_for_real_and_only_those_present(tmp_path, monkeypatch):
    monkeypatch.setattr(remover_module, "UNIT_DIR", str(tmp_path))
    monkeypatch.setattr(remover_module, "UNITS", ("ds4.service", "ds4-watchdog.timer", "ds4-worker.service"))
    (tmp_path / "ds4.service").write_text("[Unit]\n")
    (tmp_path / "ds4-watchdog.timer").symlink_to("/dev/null")  # a masked unit is one too
    host = Host()
    present = Remover(host.run_command, host.get_bin_path, check=True).units()
    assert present == ["ds4.service", "ds4-watchdog.timer"]
    assert host.calls == []
    Remover(host.run_command, host.get_bin_path, check=False).units()
    assert host.calls == [
        ["systemctl", "disable", "--now", "ds4.service"],
        ["systemctl", "disable", "--now", "ds4-watchdog.timer"],
    ]


@pytest.mark.parametrize(("still_listed", "deleted"), [(True, True), (False, False)])
def test_the_firewall_table_is_deleted_when_its_stopped_unit_left_it(still_listed, deleted):
    family, table = FIREWALL_TABLE
    host = Host({("/usr/sbin/nft", "list"): (0 if still_listed else 1, "", "")})
    assert Remover(host.run_command, host.get_bin_path, check=False).firewall(loaded=True) is True
    assert (["/usr/sbin/nft", "delete", "table", family, table] in host.calls) is deleted
    host = Host()
    assert Remover(host.run_command, host.get_bin_path, check=True).firewall(loaded=True) is True
    assert host.calls == []


def test_packages_stay_when_the_operator_keeps_them(monkeypatch):
    host = Host({("dpkg-query",): (0, "install ok installed nftables\n", "")})
    monkeypatch.setattr(remover_module, "missing", lambda names, rc, out, err: set())
    chosen, kept, left = Remover(host.run_command, host.get_bin_path, check=False).packages(
        {"packages": ["nftables"]}, ["nftables"], wanted=False
    )
    assert (chosen, kept, left) == ([], {"nftables": "ds4_remove_packages is false"}, ["nftables"])
    assert not any(call[0] == "apt-get" for call in host.calls)


def test_what_went_is_said_a_line_each_and_nothing_left_is_said_too():
    result = {
        "units": ["ds4.service"],
        "firewall": True,
        "removed": ["/opt/ds4"],
        "restored": ["/etc/default/prometheus-node-exporter"],
        "accounts": ["user ds4"],
        "groups_kept": {"render": "user alice is a member"},
        "packages": ["nftables"],
        "packages_kept": {"git": "another package needs it"},
    }
    family, table = FIREWALL_TABLE
    assert lines(result, check=True) == [
        "unit ds4.service: stopped and disabled, would go",
        f"nftables table {family} {table}: would go",
        "/opt/ds4: would go",
        "/etc/default/prometheus-node-exporter: would be put back as it was before ds4",
        "user ds4: would go",
        "group render: stays, user alice is a member",
        "package nftables: would go (purged)",
        "package git: stays, another package needs it",
    ]
    empty = dict.fromkeys(("units", "removed", "restored", "accounts", "packages"), [])
    assert lines({**empty, "firewall": False, "groups_kept": {}, "packages_kept": {}}, check=False) == [
        "nothing of ds4 is left on this Spark"
    ]
