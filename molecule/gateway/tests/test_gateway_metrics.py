"""HAProxy's Prometheus exporter on the gateway, as playbooks/monitoring.yml scrapes it.

On the gateway that converge left serving (each test puts it back as it found it). From the forge (a host that
is neither a gateway nor a Spark, where a site's Prometheus would be), GET http://gw01:8405/metrics answers
without a key, and haproxy_server_status carries the series that the alert Ds4SparkOutOfGateway selects with
the monitoring defaults (proxy = ds4_monitoring_gateway_backend, state UP) for each Spark: 1 while the Spark
is in the gateway, 0 once it is put in maintenance (as a failed upgrade leaves it), 1 again once it is back.
And the real Prometheus (Debian's package) in gw01, on the files playbooks/monitoring.yml generates with
seconds for minutes, fires Ds4SparkOutOfGateway for each Spark in maintenance and Ds4GatewayBackendDown once
none is left, and clears both once they are back (their timing: the fleet scenario's promtool cases).
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from nested import play
from prometheus_host import install_prometheus, start_prometheus
from spark import container, forge, haproxy, local_listeners, route_address
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SPARKS = ("spark01", "spark02")
MONITORING = yaml.safe_load((ROOT / "roles/ds4_monitoring/defaults/main.yml").read_text())
URL = f"http://gw01:{MONITORING['ds4_monitoring_gateway_port']}/metrics"
BACKEND = MONITORING["ds4_monitoring_gateway_backend"]
REMOTE = "/root/ds4-monitoring"
PROMETHEUS_API = "http://127.0.0.1:9090/api/v1"
STATUS = re.compile(r"^haproxy_server_status\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)


@pytest.fixture(scope="module")
def gateway(hosts):
    return hosts["gw01"]


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


def test_the_exporter_listens_on_the_gateways_default_route_address_alone(gateway):
    """Issue 40, point 5: not on every address (a public side of the gateway, loopback) by default."""
    port = MONITORING["ds4_monitoring_gateway_port"]
    assert local_listeners(gateway, port) == [f"{route_address(gateway)}:{port}"]
    assert gateway.run(f"curl -sS --max-time 5 -o /dev/null http://127.0.0.1:{port}/metrics").rc != 0


def test_a_spark_left_in_maintenance_reads_as_out_of_the_gateway(gateway):
    haproxy(gateway, f"set server {BACKEND}/spark02 state maint")
    try:
        wait_for(
            "spark02 out of the gateway's series",
            lambda: up_series() == {"spark01": "1", "spark02": "0"},
            30,
        )
    finally:
        haproxy(gateway, f"set server {BACKEND}/spark02 state ready")
    wait_for("spark02 back in the gateway's series", lambda: up_series() == dict.fromkeys(SPARKS, "1"), 60)


@pytest.fixture(scope="module")
def prometheus(gateway, tmp_path_factory):
    """Prometheus in gw01 on the live configuration, once it scrapes the gateway's exporter."""
    install_prometheus(gateway)
    work = tmp_path_factory.mktemp("monitoring")
    # Molecule reaches the hosts through 127.0.0.1; Prometheus in gw01 by their names on the network.
    names = work / "names.yml"
    names.write_text(
        json.dumps(
            {
                "gateways": {"hosts": {"gw01": {"ansible_host": "gw01"}}},
                "sparks": {"hosts": {n: {"ds4_metrics_target": f"{n}:9100"} for n in SPARKS}},
            }
        )
    )
    fast = ("scrape_interval=2s", "evaluation_interval=2s", "gateway_down_for=4s")
    settings = [
        arg for setting in (f"dir={work / 'live'}", *fast) for arg in ("-e", f"ds4_monitoring_{setting}")
    ]
    run = play(
        ROOT / "playbooks/monitoring.yml",
        *settings,
        inventory=[Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent, names],
    )
    assert run.rc == 0, run
    gateway.check_output(f"rm -rf {REMOTE} && mkdir -p {REMOTE}")
    subprocess.run(["podman", "cp", str(work / "live"), f"{container('gw01')}:{REMOTE}/live"], check=True)
    start_prometheus(gateway, "ds4-test-prometheus", REMOTE, 9090)
    wait_for("the gateway's exporter scraped", lambda: query(gateway, "haproxy_server_status"), 60)
    yield gateway
    gateway.run("systemctl stop ds4-test-prometheus")


def query(host, expr):
    url = f"{PROMETHEUS_API}/query?query=" + expr.replace(" ", "%20")
    return json.loads(host.check_output(f"curl -fsS --max-time 5 '{url}'"))["data"]["result"]


def alerts(host, name, state=None):
    """The labels of each alert NAME in STATE (pending, firing; None: either)."""
    answer = json.loads(host.check_output(f"curl -fsS --max-time 5 {PROMETHEUS_API}/alerts"))
    return [
        a["labels"]
        for a in answer["data"]["alerts"]
        if a["labels"]["alertname"] == name and state in (None, a["state"])
    ]


def test_sparks_out_of_the_gateway_and_an_empty_backend_fire_their_alerts_and_clear(prometheus, gateway):
    for spark in SPARKS:
        haproxy(gateway, f"set server {BACKEND}/{spark} state maint")
    try:
        wait_for(
            "Ds4SparkOutOfGateway firing for both Sparks",
            lambda: (
                sorted(a["server"] for a in alerts(prometheus, "Ds4SparkOutOfGateway", "firing"))
                == list(SPARKS)
            ),
            60,
        )
        empty = wait_for(
            "Ds4GatewayBackendDown firing", lambda: alerts(prometheus, "Ds4GatewayBackendDown", "firing"), 60
        )
        assert [(a["gateway"], a["proxy"]) for a in empty] == [("gw01", BACKEND)]
    finally:
        for spark in SPARKS:
            haproxy(gateway, f"set server {BACKEND}/{spark} state ready")
    wait_for("both Sparks back in the gateway", lambda: up_series() == dict.fromkeys(SPARKS, "1"), 60)
    wait_for(
        "both alerts gone",
        lambda: (
            not alerts(prometheus, "Ds4SparkOutOfGateway") and not alerts(prometheus, "Ds4GatewayBackendDown")
        ),
        60,
    )
