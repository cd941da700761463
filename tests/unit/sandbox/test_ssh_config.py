"""tests/sandbox/sandbox.py's ssh_config: each sandbox's hosts by container name, read back by ssh itself
(`ssh -G` prints what it would use), the sandboxes' files side by side; a sandbox written again replaces its
own entries only."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "sandbox"))
import sandbox  # noqa: E402


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "SSH_CONFIG", tmp_path / "config")
    monkeypatch.setattr(sandbox, "SSH_HOSTS", tmp_path / "hosts")
    return tmp_path / "config"


def instance(container, port):
    return {
        "container": container,
        "address": "127.0.0.1",
        "port": port,
        "user": "root",
        "identity_file": "/keys/id_ed25519",
    }


def resolved(config, host):
    """What ssh would use for HOST with CONFIG: its settings by lower-case name."""
    out = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def test_each_sandboxs_hosts_are_reached_by_container_name_over_a_shared_connection(config):
    sandbox.write_ssh_config(sandbox.Names("mol-a-"), [instance("mol-a-spark01", 40001)])
    sandbox.write_ssh_config(sandbox.Names("mol-b-"), [instance("mol-b-spark01", 40002)])
    a, b = resolved(config, "mol-a-spark01"), resolved(config, "mol-b-spark01")
    assert (a["hostname"], a["port"], a["user"]) == ("127.0.0.1", "40001", "root")
    assert b["port"] == "40002"
    assert a["identityfile"] == "/keys/id_ed25519" and a["identitiesonly"] == "yes"
    assert a["controlmaster"] == "auto" and a["controlpath"] != b["controlpath"]
    assert a["stricthostkeychecking"] == "false" and a["userknownhostsfile"] == "/dev/null"


def test_a_sandbox_brought_up_again_replaces_its_own_entries_only(config):
    sandbox.write_ssh_config(sandbox.Names("mol-a-"), [instance("mol-a-spark01", 40001)])
    sandbox.write_ssh_config(sandbox.Names("mol-b-"), [instance("mol-b-spark01", 40002)])
    sandbox.write_ssh_config(sandbox.Names("mol-a-"), [instance("mol-a-spark01", 40003)])
    assert resolved(config, "mol-a-spark01")["port"] == "40003"
    assert resolved(config, "mol-b-spark01")["port"] == "40002"
    files = sorted(path.name for path in (config.parent / "hosts").iterdir())
    assert files == ["mol-a-net.conf", "mol-b-net.conf"]
