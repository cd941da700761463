"""The engine firewall fails closed (issue 26, point 5), seen from the other sandbox hosts.

spark01's engine listens on every address behind its firewall (the gateway needs it). Whatever happens to
nftables on spark01, a host that is not allowed (spark02, the forge) never reaches the engine's port:
- nftables.service's start, reload and stop each flush the whole ruleset, and its drop-in loads the
  engine's table again at once;
- `nft flush ruleset` by hand: the watchdog's next run (run here once, its timer stopped meanwhile so that
  only the test runs it) finds the table missing, loads it again and says so, in the journal and in its
  metrics;
- the firewall's unit stopped: ds4.service, bound to it, stops too.
The gateway, which is allowed, reaches the engine again each time. Each test puts spark01 back as it found
it (nftables.service's state, the watchdog's timer, the firewall, the engine serving).
"""

import pytest
from spark import forge
from test_gateway import play
from waits import wait_for

MODELS = "curl -sS --max-time 10 -o /dev/null -w %{http_code} http://spark01:8000/v1/models"
TEXTFILE = "/var/lib/prometheus/node-exporter/ds4.prom"


def refused_outside(hosts):
    """The engine's port refused (curl: 7, could not connect) from spark02 and from the forge."""
    from_spark = hosts["spark02"].run(MODELS).rc
    return from_spark == 7 and forge("sh", "-c", MODELS).returncode == 7


def open_to_the_gateway(hosts):
    return hosts["gw01"].run(MODELS).stdout == "200"


def table_loaded(spark):
    return "reject with tcp reset" in spark.run("nft list table inet ds4_engine").stdout


@pytest.fixture
def spark01(hosts):
    """spark01, its watchdog's timer stopped (the test runs the watchdog itself); put back afterwards:
    nftables.service as it was, the timer, the firewall's table and the engine."""
    spark = hosts["spark01"]
    nftables_was_active = spark.run("systemctl is-active nftables.service").stdout.strip() == "active"
    spark.check_output("systemctl stop ds4-watchdog.timer")
    yield spark
    spark.run("systemctl %s nftables.service", "start" if nftables_was_active else "stop")
    spark.check_output("systemctl start ds4-watchdog.timer")
    spark.check_output("systemctl start ds4-firewall.service ds4.service")
    spark.check_output("systemctl reload ds4-firewall.service")
    wait_for("the gateway reaches spark01's engine again", lambda: open_to_the_gateway(hosts), timeout=300)
    assert table_loaded(spark) and refused_outside(hosts)


def test_nftables_service_flushing_the_ruleset_leaves_the_engine_refused_to_others(hosts, spark01):
    assert refused_outside(hosts) and open_to_the_gateway(hosts)
    # Debian's nftables.service: start and reload load /etc/nftables.conf, which begins `flush ruleset`;
    # stop is `nft flush ruleset`.
    for action in ("restart", "reload", "stop"):
        spark01.check_output("systemctl %s nftables.service", action)
        assert table_loaded(spark01), f"the engine's table is gone after systemctl {action} nftables"
        assert refused_outside(hosts), f"the engine is reachable after systemctl {action} nftables"
        assert open_to_the_gateway(hosts)


def test_the_watchdog_loads_a_flushed_table_again_and_says_so(hosts, spark01):
    since = spark01.check_output("date +%s")
    spark01.check_output("nft flush ruleset")
    assert not table_loaded(spark01)
    spark01.check_output("systemctl start ds4-watchdog.service")
    assert table_loaded(spark01)
    assert refused_outside(hosts) and open_to_the_gateway(hosts)
    said = spark01.check_output("journalctl --no-pager --output=cat -u ds4-watchdog --since=@%s", since)
    assert "the engine firewall's table inet ds4_engine was missing" in said, said
    metrics = spark01.check_output("cat %s", TEXTFILE)
    assert "ds4_spark_firewall_loaded 1" in metrics.splitlines(), metrics
    restores = [line for line in metrics.splitlines() if line.startswith("ds4_spark_firewall_restores")]
    assert restores and float(restores[0].split()[1]) >= 1, metrics
    # The engine served throughout: loading the table again restarts nothing.
    assert spark01.service("ds4.service").is_running


def test_the_engine_stops_with_its_firewall(hosts, spark01):
    assert "ds4-firewall.service" in spark01.check_output("systemctl show ds4.service --property=BindsTo")
    spark01.check_output("systemctl stop ds4-firewall.service")
    assert not table_loaded(spark01)
    assert spark01.run("systemctl is-active ds4.service").stdout.strip() != "active"
    assert not spark01.socket("tcp://0.0.0.0:8000").is_listening
    assert refused_outside(hosts)
    # Started again, the engine brings its firewall up first.
    spark01.check_output("systemctl start ds4.service")
    assert table_loaded(spark01)
    assert refused_outside(hosts) and open_to_the_gateway(hosts)


FIREWALL_FILES = (
    "/etc/systemd/system/ds4-firewall.service",
    "/etc/systemd/system/ds4.service.d/00-ds4-fleet-firewall.conf",
)


def test_the_sparks_own_play_puts_the_firewall_back_whatever_its_tags(hosts, spark01):
    """Issue 40: site.yml --tags ds4_activate (operations.md's advice) leaves the firewall play's untagged
    task out. On a Spark whose firewall was taken away while its engine listens on every address (open to
    every host, as a run with ds4_firewall false or provision.yml alone left it), that run puts the
    firewall back before the engine is served: bound to it again, refused to others."""
    moved = " && ".join(f"mv {path} {path}.test-away" for path in FIREWALL_FILES)
    spark01.check_output(
        f"systemctl stop ds4.service ds4-firewall.service && {moved} && systemctl daemon-reload"
    )
    try:
        spark01.check_output("systemctl start ds4.service")
        wait_for(
            "spark01's unguarded engine to be reachable from spark02",
            lambda: not refused_outside(hosts),
            timeout=300,
        )
        run = play("site.yml", "-l", "spark01", "--tags", "ds4_activate", "-e", "ds4_release=v0.6.3")
        assert run.rc == 0, run
        assert table_loaded(spark01) and refused_outside(hosts)
        assert "ds4-firewall.service" in spark01.check_output("systemctl show ds4.service --property=BindsTo")
    finally:
        # What the run did not put back (should it have failed).
        for path in FIREWALL_FILES:
            spark01.run(f"test -e {path} || mv {path}.test-away {path}; rm -f {path}.test-away")
        spark01.check_output("systemctl daemon-reload")


def test_a_port_of_another_service_or_a_name_for_the_engine_is_refused_before_anything_changes(hosts):
    """Issue 55: ports were only range-checked (ds4_pair_port 9100 had a coordinator's rules reset
    node_exporter's port on every address), and ds4_host localhost sent the probes to [::1] first while the
    listener proof read 127.0.0.1. Both refused by name in the settings check; spark01 changes nothing and
    node_exporter still answers Prometheus."""
    spark = hosts["spark01"]
    rules = spark.check_output("nft list table inet ds4_engine")
    run = play("site.yml", "-l", "spark01", "-e", "ds4_pair_port=9100", "-e", "ds4_host=localhost")
    assert run.rc != 0, run
    refused = next((r.data["refused"] for r in run.results if r.data.get("refused")), [])
    assert "ds4_node_exporter_port 9100 is also ds4_pair_port: each port a Spark listens on is its own " in (
        " ".join(refused)
    ), refused
    assert [m for m in refused if m.startswith("ds4_host must be an IP address, not a name")], refused
    assert {host: run.changed(host) for host in run.stats} == {"spark01": 0}, run
    assert spark.check_output("nft list table inet ds4_engine") == rules
    metrics = "curl -sS --max-time 10 -o /dev/null -w %{http_code} http://spark01:9100/metrics"
    assert hosts["gw01"].check_output(metrics) == "200"
