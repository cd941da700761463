"""HAProxy's Prometheus exporter on the gateway, as playbooks/monitoring.yml scrapes it.

On the gateway that converge left serving (each test puts it back as it found it). From the forge (a host
that is neither a gateway nor a Spark, where a site's Prometheus would be), GET http://gw01:8405/metrics
answers without a key, and haproxy_server_status carries the series that the alert Ds4SparkOutOfGateway
selects with the monitoring defaults (proxy = ds4_monitoring_gateway_backend, state UP) for each Spark: 1
while the Spark is in the gateway, 0 once it is put in maintenance (as a failed upgrade leaves it), 1 again
once it is back.
"""

import os
import re
from pathlib import Path

import yaml
from spark import forge, haproxy
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SPARKS = ("spark01", "spark02")
MONITORING = yaml.safe_load((ROOT / "roles/ds4_monitoring/defaults/main.yml").read_text())
URL = f"http://gw01:{MONITORING['ds4_monitoring_gateway_port']}/metrics"
BACKEND = MONITORING["ds4_monitoring_gateway_backend"]
STATUS = re.compile(r"^haproxy_server_status\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)


def up_series():
    """{server: value} of haproxy_server_status{proxy=BACKEND,state="UP"}, read from the forge."""
    done = forge("curl", "-sS", "--max-time", "30", URL, timeout=60)
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


def test_a_spark_left_in_maintenance_reads_as_out_of_the_gateway(hosts):
    haproxy(hosts["gw01"], f"set server {BACKEND}/spark02 state maint")
    try:
        wait_for(
            "spark02 out of the gateway's series",
            lambda: up_series() == {"spark01": "1", "spark02": "0"},
            30,
        )
    finally:
        haproxy(hosts["gw01"], f"set server {BACKEND}/spark02 state ready")
    wait_for("spark02 back in the gateway's series", lambda: up_series() == dict.fromkeys(SPARKS, "1"), 60)
