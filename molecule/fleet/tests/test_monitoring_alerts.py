"""Each alert of the Sparks fires in the real Prometheus on its real condition, and clears after (issue 29).

Runs on the fleet test_fleet.py leaves serving, with test_monitoring_garbage.py's Prometheus in spark01 on
the fast live configuration (an alert's for: and the counters' window in seconds: test_monitoring.LIVE).
The conditions of the three Sparks do not touch each other, so each Spark's story runs at once with the
others', one after the other within it, and each puts its Spark back:
- spark01: its engine hangs (SIGSTOP): the watchdog kills it and systemd starts it again
  (Ds4EngineHungRestarted); then its node_exporter stops (Ds4SparkUnreachable);
- spark02: its engine exits at every start (a model file that is not there, as a bad upgrade of the
  weights leaves it), restarted a second later each time, until the start limit: Ds4EngineRestartLoop,
  then Ds4EngineStartLimitHit; the operator's reset-failed and start;
- spark03: its engine prints lines that break the text format (Ds4MetricsDropped); the release feed names
  a newer release (Ds4UpdateAvailable), then cannot be read (Ds4UpdateCheckFailing); a model file is
  touched after its verification (Ds4WeightsNotVerified); the watchdog's timer stops (Ds4MetricsStale).
Ds4EngineDown, Ds4MetricsUnparsable, Ds4MetricsMissing and Ds4GpuThrottled fire in test_monitoring.py and
test_monitoring_garbage.py. Only in its promtool case so far: Ds4DiskShortForNextGeneration (the sandbox's
free space is the machine's).
The gateway's alerts fire in the gateway scenario (test_gateway_metrics.py).
"""

import json
from concurrent.futures import ThreadPoolExecutor

from spark import ask, failed_for_good, main_pid, release
from test_monitoring_garbage import GARBAGE, HOLD_DIR, alerts, prometheus, sparks  # noqa: F401
from waits import wait_for

FEED = "http://forge:18080/_standin/feed"
DEFAULT_FEED = "v0.6.5"  # what the release feed stand-in serves unless told otherwise
# Each start fails at once, a second after the one before, and the fifth within ten minutes is refused. (A
# crash loop driven by SIGKILL on a running engine did not reach the limit: each start waits for a model
# load, so the kills raced the starts.)
CRASH_LOOP = "/run/systemd/system/ds4.service.d/zz-test-crash-loop.conf"
CRASHING = (
    "[Unit]\nStartLimitIntervalSec=600\nStartLimitBurst=5\n"
    "[Service]\nRestartSec=1\nExecStart=\nExecStart=/opt/ds4/current/ds4-server --cuda -m /nonexistent.gguf\n"
)
FEED_OVERRIDE = "/run/systemd/system/ds4-update-check.service.d/zz-test-unreachable.conf"
WEIGHTS_FACT = "/etc/ansible/facts.d/ds4_weights.fact"  # the verified model files, where ds4_weights put them


def fires(prom, name, spark, timeout=120):
    wait_for(f"{name} firing for {spark}", lambda: spark in alerts(prom, name, "firing"), timeout=timeout)


def clears(prom, name, spark, timeout=120):
    wait_for(f"{name} gone for {spark}", lambda: spark not in alerts(prom, name), timeout=timeout)


def serving(spark):
    wait_for("the engine serving", lambda: ask(spark, check=False), timeout=180)


def hang_then_unreachable(prom, spark):
    pid = main_pid(spark)
    spark.check_output(f"kill -STOP {pid}")
    try:
        fires(prom, "Ds4EngineHungRestarted", "spark01", timeout=180)
    finally:
        spark.run(f"kill -CONT {pid}")  # nothing to do once the watchdog killed it
    assert main_pid(spark) != pid
    serving(spark)
    clears(prom, "Ds4EngineHungRestarted", "spark01")

    spark.check_output("systemctl stop prometheus-node-exporter")
    try:
        fires(prom, "Ds4SparkUnreachable", "spark01")
    finally:
        spark.check_output("systemctl start prometheus-node-exporter")
    clears(prom, "Ds4SparkUnreachable", "spark01")


def crash_loop_to_the_start_limit(prom, spark):
    spark.check_output(
        f"mkdir -p {CRASH_LOOP.rsplit('/', 1)[0]} && printf '{CRASHING}' > {CRASH_LOOP}"
        " && systemctl daemon-reload"
    )
    try:
        # It fails to start: what matters is what systemd does after.
        spark.run("systemctl restart ds4")
        failed_for_good(spark, timeout=120)
        fires(prom, "Ds4EngineRestartLoop", "spark02", timeout=60)
        fires(prom, "Ds4EngineStartLimitHit", "spark02", timeout=60)
        # At the start limit it is that alert, not a second one saying the engine is down.
        assert "spark02" not in alerts(prom, "Ds4EngineDown", "firing")
    finally:
        spark.check_output(
            f"rm -f {CRASH_LOOP} && systemctl daemon-reload"
            " && systemctl reset-failed ds4 && systemctl start ds4"
        )
    serving(spark)
    clears(prom, "Ds4EngineStartLimitHit", "spark02")
    clears(prom, "Ds4EngineRestartLoop", "spark02")


def check_updates(spark, feed):
    """Serve FEED as the release feed and run spark's update check, as its timer would."""
    spark.check_output(f"curl -fsS -X PUT --data-binary @- {FEED} <<'EOF'\n{feed}\nEOF")
    # Many checks within seconds would hit systemd's default start limit, which a daily timer never does.
    spark.check_output("systemctl reset-failed ds4-update-check.service")
    spark.check_output("systemctl start ds4-update-check.service")


def textfile_feed_weights_stale(prom, spark):
    spark.check_output(f"mkdir -p {HOLD_DIR} && printf '%s' '{GARBAGE}' > {HOLD_DIR}/metrics-extra.txt")
    try:
        fires(prom, "Ds4MetricsDropped", "spark03")
    finally:
        spark.check_output(f"rm -f {HOLD_DIR}/metrics-extra.txt")

    running = release(spark)
    try:
        check_updates(spark, running)
        clears(prom, "Ds4UpdateAvailable", "spark03")
        check_updates(spark, "v0.6.6")
        fires(prom, "Ds4UpdateAvailable", "spark03")
        check_updates(spark, running)
        clears(prom, "Ds4UpdateAvailable", "spark03")
        spark.check_output(
            f"mkdir -p {FEED_OVERRIDE.rsplit('/', 1)[0]} && printf '[Service]\\n"
            f"Environment=DS4_UPDATE_URL=http://forge:9/LATEST\\n' > {FEED_OVERRIDE}"
            " && systemctl daemon-reload"
        )
        try:
            check_updates(spark, running)
            fires(prom, "Ds4UpdateCheckFailing", "spark03")
        finally:
            spark.check_output(f"rm -f {FEED_OVERRIDE} && systemctl daemon-reload")
    finally:
        # The feed as the fleet had it, and spark03's check's answer to it.
        check_updates(spark, DEFAULT_FEED)
    clears(prom, "Ds4UpdateCheckFailing", "spark03")

    weights = json.loads(spark.file(WEIGHTS_FACT).content_string)
    model = f"{weights['gguf_dir']}/{weights['files']['base']['name']}"
    # The file's times kept aside: put back, the verification record describes it again.
    spark.check_output(f"touch -r {model} /root/ds4-test-model-times && touch {model}")
    try:
        fires(prom, "Ds4WeightsNotVerified", "spark03")
    finally:
        spark.check_output(f"touch -r /root/ds4-test-model-times {model} && rm /root/ds4-test-model-times")
    clears(prom, "Ds4WeightsNotVerified", "spark03")

    spark.check_output("systemctl stop ds4-watchdog.timer ds4-watchdog.service")
    try:
        fires(prom, "Ds4MetricsStale", "spark03")
    finally:
        spark.check_output("systemctl start ds4-watchdog.timer ds4-watchdog.service")
    clears(prom, "Ds4MetricsStale", "spark03")
    clears(prom, "Ds4MetricsDropped", "spark03")


def test_each_sparks_alerts_fire_on_their_real_condition_and_clear(prometheus, sparks):  # noqa: F811
    stories = {
        "spark01": hang_then_unreachable,
        "spark02": crash_loop_to_the_start_limit,
        "spark03": textfile_feed_weights_stale,
    }
    with ThreadPoolExecutor(len(stories)) as pool:
        running = {name: pool.submit(story, prometheus, sparks[name]) for name, story in stories.items()}
        # Each story's own failure, named; all of them have ended by the time the pool closes.
        failed = {name: str(future.exception()) for name, future in running.items() if future.exception()}
    assert failed == {}
