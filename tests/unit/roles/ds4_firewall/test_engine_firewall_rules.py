"""The engine firewall's rules (templates/ds4-engine.nft.j2): the gateways reach the engine's port only
through the engine gate's sets, declared empty; on a pair's coordinator its link port is kept for the
worker's link address, as the engine's distributed protocol has no authentication."""

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

TEMPLATE = Path(__file__).resolve().parents[4] / "roles" / "ds4_firewall" / "templates" / "ds4-engine.nft.j2"
COORDINATOR = {
    "pair": "pair01",
    "role": "coordinator",
    "port": 9400,
    "coordinator_address": "10.77.0.1",
    "worker_address": "10.77.0.2",
}


def render(pair, allowed=None):
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["comment"] = lambda text: f"# {text}"
    return environment.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed",
        _ds4_firewall_table="ds4_engine",
        _ds4_firewall_allowed=allowed or {"v4": [], "v6": []},
        _ds4_firewall_pair=pair,
        ds4_port=8000,
    )


def rules(text):
    return [line.strip() for line in text.splitlines() if line.strip().startswith("tcp dport")]


def test_only_the_workers_link_address_reaches_the_coordinators_link_port_on_its_link_address():
    """Issue 55, point 10: the rules named no destination, so a link port that was another service's
    (ds4_pair_port 9100) reset node_exporter's port on every address of the coordinator."""
    assert rules(render(COORDINATOR))[-2:] == [
        "tcp dport 9400 ip daddr 10.77.0.1 ip saddr 10.77.0.2 accept",
        "tcp dport 9400 ip daddr 10.77.0.1 reject with tcp reset",
    ]
    assert rules(render(dict(COORDINATOR, coordinator_address="fd77::1", worker_address="fd77::2")))[-2:] == [
        "tcp dport 9400 ip6 daddr fd77::1 ip6 saddr fd77::2 accept",
        "tcp dport 9400 ip6 daddr fd77::1 reject with tcp reset",
    ]


def test_the_gateways_are_admitted_only_through_the_gates_sets_which_start_empty():
    text = render({}, {"v4": ["10.88.0.9"], "v6": ["fd00::9"]})
    assert rules(text) == [
        'tcp dport 8000 iif "lo" accept',
        "tcp dport 8000 ct state established accept",
        "tcp dport 8000 ip saddr @held_v4 accept",
        "tcp dport 8000 ip6 saddr @held_v6 accept",
        "tcp dport 8000 reject with tcp reset",
    ]
    # The addresses are the gate's to add (ds4-engine-gate open, once the engine holds the port), never
    # the rules file's: loaded alone, it admits no one.
    assert "10.88.0.9" not in text and "fd00::9" not in text and "elements" not in text


@pytest.mark.parametrize("pair", [{}, dict(COORDINATOR, role="worker")])
def test_a_single_spark_and_a_worker_open_no_link_port(pair):
    assert [rule for rule in rules(render(pair)) if "9400" in rule] == []


@pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft")
def test_the_rules_are_valid_nftables(tmp_path):
    path = tmp_path / "ds4-engine.nft"
    path.write_text(render(COORDINATOR, {"v4": ["10.88.0.9"], "v6": []}))
    result = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True)
    if "Operation not permitted" in result.stderr:
        pytest.skip("nft -c needs CAP_NET_ADMIN here")
    assert result.returncode == 0, result.stderr
