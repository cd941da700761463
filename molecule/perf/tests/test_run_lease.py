"""A run killed on another controller holds the Spark only until its lease runs out (issue 28).

Controller A is a second controller on this machine: ansible-playbook in namespaces of its own, a UTS
namespace (its own host name, controller-a, which is all the lock knows of a controller besides a pid) and
a PID namespace (its processes, renewer and ssh masters included, invisible to this controller, whose pid
check can never find them), with its own ssh control sockets; it shares only the network, as two
controllers on one LAN do. Killing the namespace's first process (SIGKILL) takes every process of A down
at once, as removing an AWX job's container does: nothing of A is left to release or renew the lock.
Controller B is this test's own ansible-playbook, under the machine's host name: it waits, takes the
Spark over once A's lease has run out, and names A. Both run site.yml with the settings the perf scenario
converged with: this test needs a converged Spark, not a scenario of its own.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from nested import PROJECT
from test_perf import converge_settings, site
from waits import wait_for

LOCK = "/run/ds4-fleet/run.lock"
LEASE = 15


def lock_record(host):
    """The lock's record on the Spark, or None."""
    found = host.run(f"cat {LOCK}")
    return json.loads(found.stdout) if found.rc == 0 else None


def controller_a(control_dir):
    """site.yml on the Spark from controller A, running in the background, its ssh control sockets in
    CONTROL_DIR: its Popen."""
    ansible = Path(sys.executable).parent / "ansible-playbook"
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    env.update(
        ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir,
        ANSIBLE_NOCOLOR="1",
    )
    # A whole run (not ended early on a Spark with nothing to change), so that it is still going on when
    # it is killed; it changes nothing on this converged Spark before that.
    run = [
        str(ansible), "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(PROJECT / "site.yml"),
        *converge_settings(), "-e", "ds4_skip_when_unchanged=false", "-e", f"ds4_run_lock_lease={LEASE}",
    ]  # fmt: skip
    # --kill-child: when unshare is killed, so is the namespace's first process, and with it the rest.
    return subprocess.Popen(
        ["unshare", "--uts", "--pid", "--mount", "--mount-proc", "--fork", "--kill-child", "--",
         "sh", "-c", 'hostname controller-a && "$@"', "controller-a", *run],
        env=env, cwd=PROJECT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_run_killed_on_another_controller_is_taken_over_once_its_lease_runs_out(host):
    # No run holds the Spark to begin with. A run of this controller that failed on it (a release rolled
    # back) leaves its lock for this controller's next run to take over at once (playbooks/provision.yml);
    # controller A, another controller, would have to wait out its lease first.
    host.run(f"rm -f {LOCK}")
    # Short: a control socket's path must fit in 108 bytes.
    control_dir = tempfile.mkdtemp(prefix="ds4-a-", dir="/tmp")
    a = controller_a(control_dir)
    try:
        # Step 1: A holds the Spark and its renewer renews the lease while the run goes on.
        first = wait_for(
            "controller A holds the Spark",
            lambda: (record := lock_record(host)) and record["controller"] == "controller-a" and record,
            timeout=120,
        )
        assert first["lease"] == LEASE, first
        wait_for(
            "controller A renews its lease",
            lambda: (record := lock_record(host)) and record["renewed"] > first["renewed"],
            timeout=4 * LEASE,
        )
        assert a.poll() is None, "controller A is still running"
    finally:
        # Step 2: controller A is gone at once, every process of it.
        a.send_signal(signal.SIGKILL)
        a.wait()
        shutil.rmtree(control_dir, ignore_errors=True)
    held = lock_record(host)
    assert held is not None and held["controller"] == "controller-a", held

    try:
        # Step 3: this controller's run waits for A's lease to run out, takes over naming A, and finds
        # the Spark as converge left it.
        run = site()
        assert run.rc == 0, run
        said = (
            f"took this Spark over from {held['user']} on controller-a (pid {held['pid']}, "
            f"{held['playbook']}, since {held['since_text']}): that run stopped renewing its lease of "
            f"{LEASE} s (ds4_run_lock_lease)"
        )
        assert run.said(said, "spark01"), run
        assert run.changed("spark01") == 0, run
        assert lock_record(host) is None, "the run released the Spark at its end"
    finally:
        host.run(f"rm -f {LOCK}")
