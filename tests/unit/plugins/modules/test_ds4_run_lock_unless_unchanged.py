"""The module ds4_run_lock with unless_unchanged: the run lock taken, the Spark compared with its last
finished run's record and, when it is as that run left it, let go again, all in one module run (issue 43:
the no-op run's host calls folded). Real lock and record files in a temporary tree, the engine a loopback
HTTP server, systemctl the module's run_command given its real output format."""

import json
import os

import pytest
from ansible_collections.ds4.fleet.plugins.modules import ds4_applied, ds4_run_lock
from local_http import Handler, local_http
from module_runner import run_module

SHOWN = "UnitFileState=enabled\nActiveState=active\n"
RUN = {
    "controller": "ops",
    "pid": 100,
    "user": "alice",
    "playbook": "site.yml",
    "since": 1.0,
    "since_text": "t1",
    "token": "a" * 32,
}
OTHER = dict(RUN, pid=200, user="bob", token="b" * 32)


class Engine(Handler):
    def do_GET(self):
        self.answer(200, json.dumps({"server": {"requests_inflight": 0}}).encode(), "application/json")


@pytest.fixture
def spark(tmp_path, monkeypatch):
    """A Spark's lock directory, record directory, one managed file, and its engine's port."""
    for module in (ds4_applied, ds4_run_lock):
        monkeypatch.setattr(module.AnsibleModule, "run_command", lambda self, cmd, **kw: (0, SHOWN, ""))
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "ds4.env").write_text("DS4_CTX=524288\n")
    with local_http(Engine) as url:
        yield tmp_path, int(url.rsplit(":", 1)[1])


def compared(spark):
    tree, port = spark
    return {
        "path": str(tree / "state" / "applied.json"),
        "fingerprint": "f1",
        "secrets": {"ds4_hf_token": "hf_secret"},
        "digest_key": str(tree / "state" / "digest.key"),
        "paths": [str(tree / "ds4.env")],
        "units": ["ds4.service"],
        "port": port,
    }


def hold(spark, holder=RUN, check_mode=False):
    tree, _port = spark
    args = {
        "path": str(tree / "run" / "run.lock"),
        "holder": holder,
        "unless_unchanged": compared(spark),
        "_ansible_check_mode": check_mode,
    }
    return run_module(ds4_run_lock, args)


def record(spark):
    rc, result = run_module(ds4_applied, dict(compared(spark), state="recorded"))
    assert rc == 0, result


def lock_holder(spark):
    path = spark[0] / "run" / "run.lock"
    return json.loads(path.read_text())["token"] if path.exists() else None


def test_a_spark_with_no_record_is_held_and_told_why_the_whole_run_follows(spark):
    rc, result = hold(spark)
    assert rc == 0 and result["held"] and result["new"] and result["unchanged"] is False, result
    assert result["reason"] == "no finished run is recorded on this Spark"
    assert lock_holder(spark) == RUN["token"]


def test_a_spark_as_its_last_run_left_it_is_let_go_in_the_same_call(spark):
    record(spark)
    rc, result = hold(spark)
    assert rc == 0 and result["unchanged"] is True and result["reason"] is None, result
    assert result["held"] is False and result["new"] is False and result["changed"] is False
    assert lock_holder(spark) is None, "the lock is given back at once"
    # The secret reaches the output of neither module.
    assert "hf_secret" not in json.dumps(result)


def test_a_drifted_spark_is_held_its_record_removed_and_the_drift_named(spark):
    record(spark)
    (spark[0] / "ds4.env").write_text("DS4_DRIFTED=1\n")
    rc, result = hold(spark)
    assert rc == 0 and result["held"] and result["unchanged"] is False, result
    assert result["reason"] == f"file {spark[0]}/ds4.env changed since the last finished run"
    assert lock_holder(spark) == RUN["token"]
    assert not (spark[0] / "state" / "applied.json").exists()


def test_a_spark_another_run_holds_is_not_compared(spark):
    record(spark)
    hold_other = {"path": str(spark[0] / "run" / "run.lock"), "holder": OTHER}
    assert run_module(ds4_run_lock, hold_other)[1]["held"] is True
    rc, result = hold(spark)
    assert rc == 0 and result["held"] is False and "unchanged" not in result, result
    assert result["holder"]["user"] == "bob" and lock_holder(spark) == OTHER["token"]


def test_check_mode_compares_and_writes_nothing(spark):
    record(spark)
    rc, result = hold(spark, check_mode=True)
    assert rc == 0 and result["unchanged"] is True, result
    (spark[0] / "ds4.env").write_text("DS4_DRIFTED=1\n")
    rc, result = hold(spark, check_mode=True)
    assert rc == 0 and result["unchanged"] is False and result["held"] is True, result
    assert lock_holder(spark) is None and (spark[0] / "state" / "applied.json").exists()


def test_a_record_that_cannot_be_read_fails_and_gives_the_lock_back(spark):
    os.symlink("/etc/hostname", spark[0] / "state" / "applied.json")
    rc, result = hold(spark)
    assert rc == 1 and result["failed"] and result["held"] is False, result
    assert result["msg"].startswith(f"cannot read the run record {spark[0]}/state/applied.json")
    assert lock_holder(spark) is None
