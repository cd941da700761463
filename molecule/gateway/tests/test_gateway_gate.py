"""Nobody else answers for the engine on the gateway's path (issue 40, point 1).

spark01's engine listens on every address behind its firewall, which admits the gateway. While the engine
is stopped its port is free, and any local user may listen there answering as the engine does. The engine
gate (ds4-engine-gate, plugins/module_utils/_spark/engine_gate.py) admits the gateway only while ds4.service's
own engine holds the port: the stranger gets neither the gateway's health checks nor a client's request,
and the gateway is admitted again once the engine is back. Each test puts spark01 back serving.
"""

import json

import pytest
from spark import IMPOSTOR_LOG, start_impostor, stop_impostor
from test_gateway import KEY, backend, curl, requests_total
from waits import wait_for

# A table of the test's own that counts the connections other hosts open to the engine's port (the
# gateway's health checks and requests), before the engine firewall's own chain decides on them.
COUNTER = """
table inet ds4_test_count {
    chain input {
        type filter hook input priority -10; policy accept;
        iif != "lo" tcp dport 8000 tcp flags syn counter
    }
}
"""
MODELS = "curl -sS --max-time 10 -o /dev/null -w %{http_code} http://spark01:8000/v1/models"
# The gateway's health check (ds4_gateway_check_rise 1, a check every 2 s, fastinter 500 ms) marks a
# Spark up after one check it passes: several checks give it every chance to.
CHECKS = 4


def held(spark):
    """The addresses the engine gate admits now (both families)."""
    out = []
    for name in ("held_v4", "held_v6"):
        listing = json.loads(spark.check_output("nft -j list set inet ds4_engine %s", name))
        for item in listing["nftables"]:
            out += item.get("set", {}).get("elem", [])
    return out


def connections(spark):
    text = spark.check_output("nft -j list table inet ds4_test_count")
    for item in json.loads(text)["nftables"]:
        for expression in item.get("rule", {}).get("expr", []):
            if "counter" in expression:
                return expression["counter"]["packets"]
    raise AssertionError(f"no counter in {text}")


@pytest.fixture
def spark01(hosts):
    """spark01, serving again afterwards, with no stranger and no counting table left."""
    spark = hosts["spark01"]
    yield spark
    stop_impostor(spark)
    spark.run("nft delete table inet ds4_test_count")
    spark.check_output("systemctl start ds4.service")
    wait_for("the gateway putting spark01 back", lambda: backend(hosts)["spark01"][0] == "UP", 120)


def test_a_stranger_on_the_engines_port_never_receives_the_gateways_requests(hosts, spark01):
    spark01.check_output("systemctl stop ds4.service")
    assert held(spark01) == [], "the gate stayed open with the engine stopped"
    # On every address: the gateway reaches spark01's engine on the scenario's network.
    start_impostor(spark01, "0.0.0.0")
    wait_for("the stranger to answer on spark01:8000", lambda: spark01.run(MODELS).stdout == "200")
    spark01.check_output(": > %s", IMPOSTOR_LOG)
    spark01.check_output("echo %s | nft -f -", COUNTER)
    # The gateway's checks reach spark01 (and are refused there) several times over.
    wait_for("the gateway checking spark01 again", lambda: connections(spark01) >= CHECKS, 60)
    answers = [curl("-H", f"Authorization: Bearer {KEY}")[0] for _ in range(6)]
    assert answers == [200] * 6, answers
    reached = spark01.check_output("cat %s", IMPOSTOR_LOG)
    assert reached == "", f"the stranger received the gateway's requests:\n{reached}"
    assert held(spark01) == []
    assert backend(hosts)["spark01"][0].startswith("DOWN")
    # Refused to the gateway itself (a TCP reset), though something listens on the port.
    assert hosts["gw01"].run(MODELS).rc == 7


def test_the_gate_opens_again_when_the_engine_is_back(hosts, spark01):
    since = spark01.check_output("date +%s")
    spark01.check_output("systemctl restart ds4.service")
    assert held(spark01), "the gate stayed closed with the engine serving"
    said = spark01.check_output("journalctl --no-pager --output=cat -u ds4.service --since=@%s", since)
    assert (
        "closed: no gateway reaches port 8000" in said and "opened: the gateways reach port 8000" in said
    ), said
    assert hosts["gw01"].check_output(MODELS) == "200"
    wait_for("the gateway putting spark01 back", lambda: backend(hosts)["spark01"][0] == "UP", 120)
    before = requests_total(spark01)
    wait_for(
        "a request through the gateway reaching spark01",
        lambda: curl("-H", f"Authorization: Bearer {KEY}")[0] == 200 and requests_total(spark01) > before,
        60,
    )
