"""The ds4_hub_file module against the hub stand-in: in process (set_module_args style), and via Ansible."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.module_utils._weights import hub as ds4_hub
from ansible_collections.ds4.fleet.plugins.modules import ds4_hub_file

ROOT = Path(__file__).resolve().parents[4]
BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"
GATED = "ds4-standin-gated.gguf"
TOKEN = "hf_standin_token"


def run(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as e:
        ds4_hub_file.main()
    return e.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def args(hub, hub_files, tmp_path):
    def make(name, **extra):
        return {
            "endpoint": hub.endpoint,
            "repo": hub_files[name]["repo"],
            "file": name,
            "dest": str(tmp_path),
            "retry_delay": 0.01,
            **extra,
        }

    return make


def test_check_mode_then_fetch_then_nothing_to_do(args, hub_files, tmp_path, capsys):
    want = hub_files[DRAFTER]
    rc, out = run(args(DRAFTER, _ansible_check_mode=True), capsys)
    assert rc == 0 and out["changed"] is True
    assert (out["action"], out["bytes_to_fetch"]) == ("would_fetch", want["size"])
    assert os.listdir(tmp_path) == []

    rc, out = run(args(DRAFTER, mode="0640", sha256=want["sha256"], _ansible_diff=True), capsys)
    assert rc == 0 and out["changed"] is True and out["action"] == "fetched"
    path = tmp_path / DRAFTER
    assert hashlib.sha256(path.read_bytes()).hexdigest() == want["sha256"] == out["sha256"]
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    assert out["diff"]["before"]["size"] is None
    assert out["diff"]["after"] == {"path": str(path), "size": want["size"], "sha256": want["sha256"]}
    assert out["commit"] == want["commit"]
    assert out["progress_file"] == str(tmp_path / f".{DRAFTER}.progress.json")

    rc, out = run(args(DRAFTER, mode="0640", sha256=want["sha256"]), capsys)
    assert rc == 0 and out["changed"] is False and out["action"] == "verified"


def test_a_cut_fetch_fails_then_resumes(args, hub, hub_files, tmp_path, capsys):
    half = hub_files[BASE]["size"] // 2
    hub.set_fault(BASE, cut_after=half)
    rc, out = run(args(BASE, retries=0), capsys)
    assert rc == 1 and out["failed"] is True and f"ended at byte {half:,}" in out["msg"]
    assert json.loads((tmp_path / f".{BASE}.progress.json").read_text())["state"] == "failed"
    rc, out = run(args(BASE), capsys)
    assert rc == 0 and out["action"] == "resumed" and out["resumed_from"] == half


def test_404_names_repo_revision_and_file(args, capsys):
    rc, out = run(args(BASE, revision="v0.0.0"), capsys)
    assert rc == 1
    assert "repo antirez/deepseek-v4-gguf, revision v0.0.0, file " + BASE in out["msg"]
    assert out["error"] == "HubNotFoundError"


def test_401_says_to_set_ds4_hf_token(args, capsys):
    rc, out = run(args(GATED), capsys)
    assert rc == 1 and "set ds4_hf_token" in out["msg"]


def test_no_space_is_said_before_downloading(args, hub_files, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ds4_hub, "free_bytes", lambda path: 4096)
    rc, out = run(args(BASE), capsys)
    assert rc == 1 and out["msg"].startswith(f"not enough space in {tmp_path} to fetch {BASE}")
    assert out["shortfall_bytes"] == hub_files[BASE]["size"] - 4096
    assert os.listdir(tmp_path) == []


def test_dest_must_be_a_directory(args, tmp_path, capsys):
    rc, out = run(args(BASE, dest=str(tmp_path / "missing")), capsys)
    assert rc == 1 and "is not a directory" in out["msg"]


def test_through_ansible_the_token_is_sent_and_never_shown(hub, tmp_path):
    """The real path: AnsiballZ packs the module with its module_utils; -vvv shows the invocation."""
    module_args = json.dumps(
        {
            "endpoint": hub.endpoint,
            "repo": "ds4-standin/gated-gguf",
            "file": GATED,
            "dest": str(tmp_path),
            "token": TOKEN,
        }
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "ds4.fleet.ds4_hub_file",
            "-a",
            module_args,
            "-vvv",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"action": "fetched"' in done.stdout or "action: fetched" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    assert (tmp_path / GATED).exists()


def test_a_failed_fetch_still_says_what_went_wrong_before(args, hub, capsys, monkeypatch):
    # Recorded at the source: once a test in this process has loaded controller code, Ansible sends module
    # warnings to its display instead of the result.
    warned = []
    monkeypatch.setattr(
        ds4_hub_file.AnsibleModule, "warn", lambda self, warning, **kw: warned.append(warning)
    )
    hub.set_fault(DRAFTER, status=500, times=None)
    rc, out = run(args(DRAFTER, retries=0, peers=["http://127.0.0.1:1"]), capsys)
    assert rc == 1 and "HTTP 500" in out["msg"]
    assert any("the peer http://127.0.0.1:1 failed" in w for w in warned), warned


def test_the_owner_and_mode_are_set_through_the_hashed_file_never_by_path(
    args, hub_files, tmp_path, capsys, monkeypatch
):
    """Issue 26: an adopted file was hashed, then stat-ed and chowned by path; its owner could swap in a
    link between the steps. Now one descriptor from the hash to the chown."""
    if os.geteuid() != 0:
        pytest.skip("chowning to another user needs root")
    path = tmp_path / DRAFTER
    path.write_bytes(hub_files[DRAFTER]["path"].read_bytes())
    for name in ("chown", "lchown", "chmod", "lchmod"):
        monkeypatch.setattr(os, name, lambda *a, **k: pytest.fail("changed by path"), raising=False)
    rc, out = run(args(DRAFTER, owner="nobody", group="nogroup", mode="0640"), capsys)
    assert rc == 0 and out["action"] == "hashed" and out["changed"] is True, out
    st = path.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (65534, 0o640)
    rc, out = run(args(DRAFTER, owner="nobody", group="nogroup", mode="0640"), capsys)
    assert rc == 0 and out["action"] == "verified" and out["changed"] is False, out
