"""The monitoring defaults and the gateway agree: playbooks/monitoring.yml scrapes the gateway at the port
where ds4_gateway serves HAProxy's Prometheus exporter, and Ds4SparkOutOfGateway selects the backend that
ds4_gateway names. Apart, the alert could never fire (issue 29); molecule/gateway's test_gateway_metrics.py
reads the exporter itself."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def defaults(path):
    return yaml.safe_load((REPO / path).read_text())


def test_the_monitoring_defaults_name_the_gateways_backend_and_exporter_port():
    monitoring = defaults("roles/ds4_monitoring/defaults/main.yml")
    assert (
        monitoring["ds4_monitoring_gateway_backend"]
        == defaults("roles/ds4_common/vars/main.yml")["_ds4_gateway_backend"]
    )
    assert (
        monitoring["ds4_monitoring_gateway_port"]
        == defaults("roles/ds4_gateway/defaults/main.yml")["ds4_gateway_metrics_port"]
    )


def test_the_gateway_serves_haproxys_exporter_on_its_metrics_port():
    config = (REPO / "roles/ds4_gateway/templates/ds4-gateway.haproxy.cfg.j2").read_text()
    # A section of its own, beside the API's frontend and the Sparks' backend, which it leaves whole (the
    # backend of the Sparks that serve a vision model tracks that one's servers).
    sections = re.findall(r"^(?:frontend|backend) .*$", config, re.M)
    assert sections == [
        "frontend ds4",
        "frontend ds4_metrics",
        "backend {{ _ds4_gateway_backend }}",
        "backend {{ _ds4_gateway_vision_backend }}",
    ]
    assert "\n    default_backend {{ _ds4_gateway_backend }}\n" in config
    frontend = re.search(r"^frontend ds4_metrics\n((?:    .*\n)+)", config, re.M)
    assert frontend, "no frontend ds4_metrics in the gateway's HAProxy configuration"
    lines = frontend.group(1).splitlines()
    assert "    bind {{ _ds4_gateway_metrics_listen }}:{{ ds4_gateway_metrics_port | int }}" in lines
    assert "    http-request use-service prometheus-exporter if { path /metrics }" in lines
