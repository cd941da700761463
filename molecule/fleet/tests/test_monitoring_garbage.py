"""What watches the textfile itself, with the real node_exporter and Prometheus (Debian's packages).

Runs after test_monitoring.py, on the fleet it leaves serving, with a Prometheus of its own in spark01 on
the fast live configuration. node_exporter drops a textfile whole for one line it cannot parse: an engine
that prints garbage in its /metrics (the stand-in's metrics-extra.txt) must not take the Spark's ds4
series with it, so that Ds4EngineDown still fires when that engine stops. A file node_exporter cannot
parse, and a Spark whose ds4 series are gone, are alerts of their own (Ds4MetricsUnparsable,
Ds4MetricsMissing): they wait 5 minutes before firing, which their promtool cases
(ds4-alerts-metrics.promtool.yml) show; here, with seconds for minutes, each fires on the real condition,
and is gone after. So does a GPU the GPU stand-in reports throttled (Ds4GpuThrottled, after 10 minutes),
from the GPU's health that the watchdog reads with nvidia-smi on each run.
"""

import json

import pytest
from spark import sandbox_host
from test_monitoring import (
    MONITOR,
    NAMES,
    REMOTE,
    TESTS,
    configurations,
    copy_in,
    install_prometheus,
    start_prometheus,
)
from waits import wait_for

API = "http://127.0.0.1:9091/api/v1"
HOLD_DIR = "/run/ds4-standin"  # where the stand-in engine reads metrics-extra.txt
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
THROTTLE_FILE = "/etc/ds4-standin/gpu-throttle"  # makes the GPU stand-in report these reasons active
# An unquoted label value and a second TYPE for a family: each made node_exporter drop all of ds4.prom.
GARBAGE = "ds4_tokens_total{model=deepseek} 5\n# TYPE ds4_requests_inflight counter\n<html>502</html>\n"


@pytest.fixture(scope="module")
def sparks():
    return {name: sandbox_host(name) for name in NAMES}


def api(host, path):
    return json.loads(host.check_output(f"curl -fsS --max-time 5 '{API}/{path}'"))["data"]


def query(host, expr):
    return api(host, "query?query=" + expr.replace(" ", "%20"))["result"]


def by_spark(host, expr):
    return {r["metric"]["spark"]: r["value"][1] for r in query(host, expr)}


def alerts(host, name, state=None):
    """The Sparks for which alert NAME is in STATE (pending, firing; None: either)."""
    return [
        a["labels"]["spark"]
        for a in api(host, "alerts")["alerts"]
        if a["labels"]["alertname"] == name and state in (None, a["state"])
    ]


@pytest.fixture(scope="module")
def prometheus(sparks, tmp_path_factory):
    """A Prometheus of this test's own in spark01 (port 9091), on the fast configuration."""
    host = sparks[MONITOR]
    install_prometheus(host)
    defaults, live = configurations(tmp_path_factory.mktemp("monitoring-garbage"))
    host.check_output(f"rm -rf {REMOTE}/garbage && mkdir -p {REMOTE}/garbage")
    copy_in(defaults, f"{REMOTE}/garbage/defaults")
    copy_in(TESTS / "ds4-alerts-metrics.promtool.yml", f"{REMOTE}/garbage/defaults/")
    copy_in(live, f"{REMOTE}/garbage/live")
    start_prometheus(host, "ds4-test-prometheus-garbage", f"{REMOTE}/garbage", 9091)
    wait_for(
        "the three Sparks' ds4 series scraped",
        lambda: len(query(host, "ds4_spark_engine_up == 1")) == 3,
        timeout=90,
    )
    yield host
    host.run("systemctl stop ds4-test-prometheus-garbage")


def test_promtool_times_the_textfile_alerts(prometheus):
    run = prometheus.run(
        f"cd {REMOTE}/garbage/defaults && promtool test rules ds4-alerts-metrics.promtool.yml"
    )
    assert run.rc == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_an_engine_printing_garbage_keeps_its_series_and_still_fires_engine_down(prometheus, sparks):
    spark = sparks["spark02"]
    # The counts so far (another test may have made an engine print garbage before).
    before = by_spark(prometheus, "ds4_spark_metrics_dropped_total")
    spark.check_output(f"mkdir -p {HOLD_DIR} && printf '%s' '{GARBAGE}' > {HOLD_DIR}/metrics-extra.txt")
    try:
        # Each watchdog run leaves the garbage out and counts it; the file still parses.
        def counted():
            now = by_spark(prometheus, "ds4_spark_metrics_dropped_total")
            return now if now["spark02"] != before["spark02"] else None

        counts = wait_for("spark02's dropped lines counted", counted, timeout=60)
        # Only spark02's.
        assert {n: c for n, c in counts.items() if n != "spark02"} == {
            n: c for n, c in before.items() if n != "spark02"
        }
        assert by_spark(prometheus, "node_textfile_scrape_error") == dict.fromkeys(NAMES, "0")
        assert "spark02" in by_spark(prometheus, "ds4_requests_inflight")
        prom = spark.file(f"{TEXTFILE_DIR}/ds4.prom").content_string
        assert "model=deepseek" not in prom and "<html>" not in prom
        assert prom.count("# TYPE ds4_requests_inflight ") == 1

        spark.check_output("systemctl stop ds4")
        try:
            firing = wait_for(
                "Ds4EngineDown to fire for the engine that printed garbage",
                lambda: alerts(prometheus, "Ds4EngineDown", "firing"),
                timeout=90,
            )
            assert firing == ["spark02"]
        finally:
            spark.check_output("systemctl start ds4")
    finally:
        spark.check_output(f"rm -f {HOLD_DIR}/metrics-extra.txt")


def test_a_textfile_node_exporter_cannot_parse_is_an_alert(prometheus, sparks):
    spark = sparks["spark03"]
    # A site's own file beside ds4.prom: node_exporter drops it, and says so for the whole directory.
    spark.check_output(f"printf 'site_thing{{a=b}} 1\\n' > {TEXTFILE_DIR}/site.prom")
    try:
        firing = wait_for(
            "Ds4MetricsUnparsable firing for spark03",
            lambda: alerts(prometheus, "Ds4MetricsUnparsable", "firing"),
            timeout=60,
        )
        assert firing == ["spark03"]
        assert by_spark(prometheus, "node_textfile_scrape_error == 1") == {"spark03": "1"}
    finally:
        spark.check_output(f"rm -f {TEXTFILE_DIR}/site.prom")
    wait_for(
        "Ds4MetricsUnparsable gone once the file parses",
        lambda: not alerts(prometheus, "Ds4MetricsUnparsable"),
        timeout=60,
    )


def test_a_spark_without_its_ds4_series_is_an_alert(prometheus, sparks):
    spark = sparks["spark03"]
    spark.check_output(
        f"systemctl stop ds4-watchdog.timer ds4-watchdog.service && rm {TEXTFILE_DIR}/ds4.prom"
    )
    try:
        firing = wait_for(
            "Ds4MetricsMissing firing for spark03",
            lambda: alerts(prometheus, "Ds4MetricsMissing", "firing"),
            timeout=60,
        )
        assert firing == ["spark03"]
        # Nothing else can say it: every ds4 series of spark03 is gone.
        assert "spark03" not in by_spark(prometheus, "ds4_spark_engine_up")
    finally:
        # The service too: one run now, whenever the timer's next one falls.
        spark.check_output("systemctl start ds4-watchdog.timer ds4-watchdog.service")
    wait_for(
        "Ds4MetricsMissing gone once the watchdog writes again",
        lambda: not alerts(prometheus, "Ds4MetricsMissing"),
        timeout=60,
    )


def test_each_sparks_gpu_health_is_read_and_a_throttled_gpu_is_an_alert(prometheus, sparks):
    temperatures = wait_for(
        "each Spark's GPU temperature",
        lambda: (
            len(by_spark(prometheus, "ds4_spark_gpu_temperature_celsius")) == 3
            and by_spark(prometheus, "ds4_spark_gpu_temperature_celsius")
        ),
        timeout=60,
    )
    assert temperatures == dict.fromkeys(NAMES, "40")
    # A GB10 reports no power limit: no series, rather than a limit of 0 W.
    assert query(prometheus, "ds4_spark_gpu_power_limit_watts") == []
    assert by_spark(prometheus, "ds4_spark_gpu_clocks_event_active == 1") == {}
    spark = sparks["spark01"]
    spark.check_output(f"printf 'sw_power_cap\\n' > {THROTTLE_FILE}")
    try:
        firing = wait_for(
            "Ds4GpuThrottled firing for spark01",
            lambda: alerts(prometheus, "Ds4GpuThrottled", "firing"),
            timeout=60,
        )
        assert firing == ["spark01"]
        active = query(prometheus, "ds4_spark_gpu_clocks_event_active == 1")
        assert [(r["metric"]["spark"], r["metric"]["reason"]) for r in active] == [
            ("spark01", "sw_power_cap")
        ]
    finally:
        spark.check_output(f"rm -f {THROTTLE_FILE}")
    wait_for(
        "Ds4GpuThrottled gone once the GPU runs free",
        lambda: not alerts(prometheus, "Ds4GpuThrottled"),
        timeout=60,
    )
