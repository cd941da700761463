"""The ds4_files action and module through Ansible, as the service role runs them: the sources read on the
controller, check mode with a diff a file, then the files, then nothing to do; a bad source named."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def ds4_files(args, *options):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", "ds4.fleet.ds4_files",
         "-a", json.dumps(args), *options],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_check_mode_then_the_files_then_nothing(tmp_path):
    (tmp_path / "ds4-probe").write_text("#!/bin/sh\nexit 0\n")
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    args = {"dest": str(lib), "src": {str(tmp_path / "ds4-probe"): "0755", str(ROOT / "galaxy.yml"): "0644"}}
    result = ds4_files(args, "--check", "--diff")
    assert result["changed"] and result["written"] == ["ds4-probe", "galaxy.yml"], result
    assert [diff["after_header"] for diff in result["diff"]] == [f"{lib}/ds4-probe (mode 0755)",
                                                                 f"{lib}/galaxy.yml (mode 0644)"]  # fmt: skip
    assert list(lib.iterdir()) == []
    result = ds4_files(args)
    assert result["changed"] and (lib / "galaxy.yml").read_text() == (ROOT / "galaxy.yml").read_text()
    assert (lib / "ds4-probe").stat().st_mode & 0o777 == 0o755
    result = ds4_files(args)
    assert not result["changed"] and result["written"] == [], result


def test_a_source_that_cannot_be_read_is_named(tmp_path):
    result = ds4_files({"dest": str(tmp_path), "src": {str(tmp_path / "missing"): "0644"}})
    assert result["failed"] and result["msg"].startswith(f"cannot read {tmp_path}/missing to install it")
