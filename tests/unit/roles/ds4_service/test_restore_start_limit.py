"""A rollback's restart (restore.yml) clears the restored unit's start limit first, as the role's restart
handler does: a unit that failed its starts while the switch was smoke-tested (a worker restarted every
ds4_restart_sec through a 300 s smoke wait reaches ds4_start_limit_burst) is otherwise refused by systemd
("start request repeated too quickly"), and the rollback would leave the Spark down."""

from pathlib import Path

import yaml

RESTORE = Path(__file__).resolve().parents[4] / "roles" / "ds4_service" / "tasks" / "restore.yml"


def tasks():
    return yaml.safe_load(RESTORE.read_text())


def index_of(predicate, what):
    found = [i for i, task in enumerate(tasks()) if predicate(task)]
    assert len(found) == 1, f"restore.yml has {len(found)} tasks that {what}"
    return found[0]


def test_the_rollback_clears_the_restored_units_start_limit_before_restarting_it():
    restart = index_of(
        lambda t: t.get("ansible.builtin.systemd_service", {}).get("state") == "restarted",
        "restart a unit",
    )
    unit = tasks()[restart]["ansible.builtin.systemd_service"]["name"]
    reset = index_of(
        lambda t: (
            str(t.get("ansible.builtin.command", "")).split() == ["systemctl", "reset-failed", *unit.split()]
        ),
        f"clear the start limit of {unit}",
    )
    assert reset < restart
    # Never a reason to stop the rollback: a unit never loaded has no limit to clear.
    assert tasks()[reset].get("failed_when") is False
