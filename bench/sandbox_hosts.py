"""What the benchmarks share: sandbox hosts of their own (tests/sandbox/sandbox.py), an inventory that
reaches them, and how podman and ansible-playbook are run. A module beside the scripts, not a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "tests" / "sandbox" / "sandbox.py"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def podman(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise SystemExit(f"bench: podman {' '.join(args[:3])} failed: {proc.stderr.strip()}")
    return proc.stdout


def _prefixed(prefix: str) -> list[str]:
    return ["--prefix", prefix] if prefix else []


def sandbox_up(prefix: str, hosts, *options: str) -> dict[str, dict]:
    """Start the sandbox's `hosts` (the built-in sandbox when `prefix` is ""): name -> the inventory
    variables that reach it over SSH."""
    cmd = [sys.executable, str(SANDBOX), *_prefixed(prefix), "up", "--json", "--hosts", *hosts, *options]
    instances = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {
        i["instance"]: {
            "ansible_host": i["address"],
            "ansible_port": i["port"],
            "ansible_user": i["user"],
            "ansible_ssh_private_key_file": i["identity_file"],
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        }
        for i in instances
    }


def sandbox_down(prefix: str) -> None:
    subprocess.run([sys.executable, str(SANDBOX), *_prefixed(prefix), "down"], check=False)


def write_inventory(workdir: Path, groups: dict) -> Path:
    """An inventory in `workdir` with `groups` (as a hosts.yml holds them) and, beside them, the built-in
    sandbox's group_vars: its random ports, the sandbox's settings."""
    inventory = workdir / "inventory"
    inventory.mkdir()
    (inventory / "group_vars").symlink_to(ROOT / "inventory" / "sandbox" / "group_vars")
    (inventory / "hosts.yml").write_text(json.dumps(groups))
    return inventory


def playbook_command(inventory: Path, path, *args: str, **env: str) -> tuple[list[str], dict]:
    """The command line and environment of ansible-playbook with the repository's ansible.cfg, no colour."""
    environ = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env)
    return [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(ROOT / path), *args], environ
