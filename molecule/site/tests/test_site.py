"""site.yml on sandbox Sparks, asserted on the hosts. After converge both serve v0.6.3 on the legacy
generation. The tests run in file order and build on each other's state: each nested `ansible-playbook
site.yml` is a run whose exit status and message are asserted, so that an expected failure (the smoke
test of v0.6.6) fails the scenario only when the expectation is wrong.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[3]
ROOT = "/opt/ds4"
GGUF = "/var/lib/ds4/gguf"
LEGACY = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf",
    "DSpark-drafter-Q2K-Q8.gguf",
}
GEN_0731 = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf",
    "DSpark-drafter-Q2K-Q8-0731.gguf",
}
UPGRADE = ["-e", "ds4_release=v0.6.5", "-e", "ds4_model_generation=0731"]


def site(limit, *args):
    """Run site.yml on one Spark of this scenario; (exit status, output)."""
    ansible = shutil.which(
        "ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    proc = subprocess.run(
        [ansible, "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(PROJECT / "site.yml"), "-l", limit,
         "-e", "ds4_release=v0.6.3", "-e", "ds4_model_generation=legacy", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
    )  # fmt: skip
    return proc.returncode, proc.stdout


def changed(output, name):
    line = next(line for line in output.splitlines() if line.startswith(f"{name} ") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def release(host, link="current"):
    return host.run(f"readlink {ROOT}/{link}").stdout.strip().rsplit("/", 1)[-1]


def models(host):
    return {name for name in host.check_output(f"ls {GGUF}").split() if name.endswith(".gguf")}


def answer(host):
    body = json.dumps(
        {
            "model": "deepseek-v4-flash",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        }
    )
    out = host.check_output(f"curl -fsS --max-time 30 -H 'Content-Type: application/json' -d '{body}' "
                            "http://127.0.0.1:8000/v1/chat/completions")  # fmt: skip
    return json.loads(out)["choices"][0]["message"]["content"]


def state(host):
    """What a run must not change: links, launch files, units, weights and releases, with their times."""
    return host.check_output(
        f"ls -l --time-style=+%s.%N {ROOT} {ROOT}/releases {GGUF}; "
        "stat -c '%n %s %Y' /etc/ds4/ds4.env /etc/systemd/system/ds4.service; "
        "systemctl show ds4 -p ExecMainPID -p ActiveState"
    )


@pytest.fixture
def name(host):
    return host.backend.get_hostname().removeprefix("mol-site-")


def test_fresh_provision_serves_the_release_and_model_it_names(host):
    assert release(host) == "v0.6.3"
    assert host.service("ds4").is_running and host.service("ds4").is_enabled
    assert models(host) == LEGACY
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.3" in description and "chat-v2-imatrix.gguf" in description
    assert "Paris" in answer(host)
    assert host.socket("tcp://127.0.0.1:8000").is_listening


def test_a_check_mode_upgrade_changes_nothing(host, name):
    before = state(host)
    rc, out = site(name, "--check", "--diff", *UPGRADE)
    assert rc == 0, out
    assert "Point current at v0.6.5" in out
    assert state(host) == before


def test_a_second_run_changes_nothing_and_restarts_nothing(host, name):
    pid = host.check_output("systemctl show ds4 -p ExecMainPID --value")
    rc, out = site(name)
    assert rc == 0, out
    assert changed(out, name) == 0, out
    assert host.check_output("systemctl show ds4 -p ExecMainPID --value") == pid


def test_a_release_that_fails_its_smoke_test_is_rolled_back(host, name):
    rc, out = site(name, "-e", "ds4_release=v0.6.6")
    assert rc != 0
    assert 'Activation of v0.6.6 failed at "Ask the engine the smoke question' in out, out
    assert "'The capital of France is Lyon.'" in out
    assert "Rolled back to v0.6.3" in out and "it serves again" in out
    assert "Last lines of the engine's log:" in out
    assert release(host) == "v0.6.3"
    assert host.run(f"test -e {ROOT}/previous").rc != 0, "a first switch that failed leaves no previous link"
    assert host.service("ds4").is_running
    assert "v0.6.3" in host.check_output("systemctl show ds4 -p Description --value")
    assert "Paris" in answer(host)
    assert models(host) == LEGACY


@pytest.mark.parametrize("policy", ["remove", "keep"])
def test_the_upgrade_to_0731_serves_the_new_pair_and_treats_old_weights_by_policy(host, name, policy):
    # spark01 upgrades under remove, spark02 under keep.
    if (name, policy) not in (("spark01", "remove"), ("spark02", "keep")):
        pytest.skip(f"{name} upgrades under the other policy")
    rc, out = site(name, *UPGRADE, "-e", f"ds4_old_weights={policy}")
    assert rc == 0, out
    assert release(host) == "v0.6.5"
    assert release(host, "previous") == "v0.6.3"
    assert "Paris" in answer(host)
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.5" in description and "imatrix-0731.gguf" in description
    expected = GEN_0731 if policy == "remove" else GEN_0731 | LEGACY
    assert models(host) == expected
    env = host.file("/etc/ds4/ds4.env").content_string
    assert "DS4_DSPARK_MODEL=/var/lib/ds4/gguf/DSpark-drafter-Q2K-Q8-0731.gguf" in env
