"""The ds4_owned_dir module on real directories: check mode and diff, a refusal naming the path and why."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.modules import ds4_owned_dir


def run(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as e:
        ds4_owned_dir.main()
    return e.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def base():
    # Below a root-owned directory: pytest's own lies under /tmp, writable by everyone, which is refused.
    if os.geteuid() != 0:
        pytest.skip("handing a directory to another user needs root")
    path = Path(tempfile.mkdtemp(prefix="ds4-owned-dir-", dir="/var/cache"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_check_mode_and_diff_then_the_change_then_nothing(base, capsys):
    args = {"path": str(base / "kv"), "owner": "nobody", "group": "nogroup", "mode": "0750"}
    rc, out = run(dict(args, _ansible_check_mode=True, _ansible_diff=True), capsys)
    assert rc == 0 and out["changed"] and out["created"] == [str(base / "kv")], out
    assert out["diff"]["before"] == {"path": str(base / "kv"), "state": "absent"}
    assert not (base / "kv").exists()
    rc, out = run(dict(args, _ansible_diff=True), capsys)
    assert rc == 0 and out["changed"] and (out["uid"], out["mode"]) == (65534, "0750"), out
    assert (base / "kv").stat().st_uid == 65534
    rc, out = run(args, capsys)
    assert rc == 0 and not out["changed"], out


def test_a_link_is_refused_naming_the_path(base, capsys):
    (base / "kv").symlink_to("/etc")
    rc, out = run({"path": str(base / "kv"), "owner": "nobody", "group": "nogroup", "mode": "0750"}, capsys)
    assert rc == 1 and out["msg"] == (
        f"refusing to hand {base}/kv to nobody: {base}/kv is a symbolic link: refusing to go through it"
    )
    assert os.stat("/etc").st_uid == 0


def test_an_unknown_user_fails_and_in_check_mode_is_yet_to_come(base, capsys):
    args = {"path": str(base / "kv"), "owner": "no-such-user", "group": "nogroup", "mode": "0750"}
    rc, out = run(args, capsys)
    assert rc == 1 and out["msg"] == "user no-such-user does not exist on this host"
    rc, out = run(dict(args, _ansible_check_mode=True), capsys)
    assert rc == 0 and out["changed"] and not (base / "kv").exists()


def test_a_parent_owner_is_trusted_on_the_way_only_when_named(base, capsys):
    parent = base / "prometheus"
    parent.mkdir(mode=0o755)
    os.chown(parent, 65534, 65534)
    args = {"path": str(parent / "node-exporter"), "owner": "root", "group": "root", "mode": "0755"}
    rc, out = run(args, capsys)
    assert rc == 1 and "belongs to uid 65534, neither root nor" in out["msg"], out
    rc, out = run(dict(args, parent_owner="nobody"), capsys)
    assert rc == 0 and out["changed"] and (out["uid"], out["mode"]) == (0, "0755"), out
    rc, out = run(dict(args, parent_owner="no-such-user"), capsys)
    assert rc == 1 and out["msg"] == "user no-such-user does not exist on this host", out
