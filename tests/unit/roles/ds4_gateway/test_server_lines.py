"""The gateway's server lines as the role's HAProxy template writes them (issue 50): the sandbox sets
ds4_gateway_backend_address on every Spark (their ansible_host is 127.0.0.1), so the production path, a
Spark reached at its ansible_host, is rendered here from the template itself."""

from pathlib import Path

import jinja2
import yaml

ROLE = Path(__file__).resolve().parents[4] / "roles" / "ds4_gateway"


def server_lines(hostvars, sparks, ds4_port=8000):
    """The backend's server lines of the role's default template, for SPARKS with HOSTVARS."""
    default = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["ds4_gateway_config_template"]
    template = (ROLE / "templates" / default).read_text()
    start = template.index("{% for spark in _ds4_gateway_sparks %}")
    end = template.index("{% endfor %}", start) + len("{% endfor %}")
    text = (
        jinja2.Environment(undefined=jinja2.StrictUndefined)
        .from_string(template[start:end])
        .render(_ds4_gateway_sparks=sparks, hostvars=hostvars, ds4_port=ds4_port)
    )
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_a_spark_is_reached_at_its_ansible_host_unless_it_names_its_backend_address():
    hostvars = {
        "spark01": {"ansible_host": "10.0.0.11"},
        "spark02": {
            "ansible_host": "10.0.0.12",
            "ds4_gateway_backend_address": "10.1.0.12",
            "ds4_port": 8001,
        },
        "spark03": {"ansible_host": "fd00::13"},
        "spark04": {},
    }
    assert server_lines(hostvars, ["spark01", "spark02", "spark03", "spark04"]) == [
        "server spark01 10.0.0.11:8000",
        "server spark02 10.1.0.12:8001",
        # HAProxy reads an IPv6 address before the last colon as the address.
        "server spark03 fd00::13:8000",
        # Neither: the inventory name, which the gateway resolves.
        "server spark04 spark04:8000",
    ]
