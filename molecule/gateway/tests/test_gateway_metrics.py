"""HAProxy's Prometheus exporter on the gateway, as playbooks/monitoring.yml scrapes it.

Runs after test_gateway.py, on the gateway it leaves serving. From the forge (a host that is neither a
gateway nor a Spark, where a site's Prometheus would be), GET http://gw01:8405/metrics answers without a
key, and haproxy_server_status carries the series that the alert Ds4SparkOutOfGateway selects with the
monitoring defaults (proxy = ds4_monitoring_gateway_backend, state UP) for each Spark: 1 while the Spark is
in the gateway, 0 once it is put in maintenance (as a failed upgrade leaves it), 1 again once it is back.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
import testinfra
import yaml
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PREFIX = f"mol-{os.environ['MOLECULE_SCENARIO_NAME']}-"
FORGE = f"{PREFIX}forge"
SPARKS = ("spark01", "spark02")
MONITORING = yaml.safe_load((ROOT / "roles/ds4_monitoring/defaults/main.yml").read_text())
URL = f"http://gw01:{MONITORING['ds4_monitoring_gateway_port']}/metrics"
BACKEND = MONITORING["ds4_monitoring_gateway_backend"]
# One command to HAProxy's runtime API (its first argument) in gw01, without the collection.
RUNTIME = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_UNIX); s.connect('/run/haproxy/admin.sock')\n"
    "s.sendall(sys.argv[1].encode()+b'\\n'); out=b''\n"
    "while (c:=s.recv(65536)): out+=c\n"
    "sys.stdout.write(out.decode())\n"
)
STATUS = re.compile(r"^haproxy_server_status\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)


@pytest.fixture(scope="module")
def gateway():
    return testinfra.get_host(f"podman://{PREFIX}gw01")


def up_series():
    """{server: value} of haproxy_server_status{proxy=BACKEND,state="UP"}, read from the forge."""
    done = subprocess.run(
        ["podman", "exec", FORGE, "curl", "-sS", "--max-time", "30", URL],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"GET {URL} from the forge: {done.returncode} {done.stderr}"
    found = {}
    for match in STATUS.finditer(done.stdout):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("proxy") == BACKEND and labels.get("state") == "UP":
            found[labels["server"]] = match["value"]
    return found


def test_the_exporter_says_each_spark_is_in_the_backend_the_alert_watches():
    assert BACKEND == "ds4_sparks"
    assert wait_for("both Sparks up at the gateway", lambda: up_series() == dict.fromkeys(SPARKS, "1"), 60)


def test_a_spark_left_in_maintenance_reads_as_out_of_the_gateway(gateway):
    gateway.check_output("python3 -c %s %s", RUNTIME, f"set server {BACKEND}/spark02 state maint")
    try:
        wait_for(
            "spark02 out of the gateway's series",
            lambda: up_series() == {"spark01": "1", "spark02": "0"},
            30,
        )
    finally:
        gateway.check_output("python3 -c %s %s", RUNTIME, f"set server {BACKEND}/spark02 state ready")
    wait_for("spark02 back in the gateway's series", lambda: up_series() == dict.fromkeys(SPARKS, "1"), 60)
