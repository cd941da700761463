"""node_exporter's start through roles/ds4_service/files/ds4-node-exporter: it listens on the address the
Spark has on its default route when it starts, with the distribution's arguments after it (issue 40, point
5g: not on every address, and not on an address written when the role ran, which a new lease takes away)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.exporter import (
    default_route_address,
    host_port,
)

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def installed(tmp_path):
    """ds4-node-exporter with exporter.py beside it, as the role installs them, and a stand-in exporter
    that prints the arguments it was started with."""
    shutil.copy2(ROOT / "roles/ds4_service/files/ds4-node-exporter", tmp_path / "ds4-node-exporter")
    shutil.copy2(ROOT / "plugins/module_utils/_spark/exporter.py", tmp_path / "exporter.py")
    exporter = tmp_path / "exporter"
    exporter.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    exporter.chmod(0o755)
    return tmp_path


def run(installed, *args):
    return subprocess.run(
        [sys.executable, str(installed / "ds4-node-exporter"), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(default_route_address() is None, reason="this host has no default route")
def test_the_exporter_starts_on_the_default_route_address_with_the_distributions_arguments(installed):
    done = run(installed, str(installed / "exporter"), "9100", "--collector.textfile.directory=/t", "--x")
    assert done.returncode == 0, done.stderr
    listen = host_port(default_route_address(), 9100)
    assert done.stdout.splitlines() == [
        f"--web.listen-address={listen}",
        "--collector.textfile.directory=/t",
        "--x",
    ]


def test_without_a_default_route_it_gives_up_naming_the_setting(installed):
    # The copy beside the script is the one it imports: one with no route at all, and no wait.
    module = installed / "exporter.py"
    module.write_text(
        module.read_text() + "\n\ndef default_route_address(open_socket=None):\n    return None\n"
    )
    script = installed / "ds4-node-exporter"
    script.write_text(script.read_text().replace("WAIT = 60", "WAIT = 0"))
    done = run(installed, str(installed / "exporter"), "9100")
    assert done.returncode == 1 and done.stdout == ""
    assert "no default route after 0 s" in done.stderr and "ds4_node_exporter_listen_address" in done.stderr


def test_arguments_that_name_their_own_listen_address_are_passed_on_as_they_are(installed):
    args = ["--web.listen-address=:9100", "--collector.textfile.directory=/site"]
    done = run(installed, str(installed / "exporter"), "9100", *args)
    assert done.returncode == 0 and done.stdout.splitlines() == args


def test_a_bad_call_is_refused_with_its_usage(installed):
    done = run(installed, str(installed / "exporter"), "port")
    assert done.returncode == 2 and done.stderr.startswith("usage: ds4-node-exporter")
