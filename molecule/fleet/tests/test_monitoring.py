"""playbooks/monitoring.yml and a real Prometheus (Debian's package) scraping the three Sparks.

Reads the fleet as test_fleet.py's tests leave it, serving, whatever release each Spark runs then. The
configuration is generated twice on the controller: with the defaults, for promtool's checks and its rule
tests (ds4-alerts.promtool.yml: the timing of each alert), and with seconds instead of minutes, for one
live run in spark01: Prometheus scrapes each Spark's node_exporter by its container name, sees what each
runs and the engine's own series, and fires Ds4EngineDown for the one Spark whose ds4 is stopped, and
for no other, until it serves again. The live rules come from the repository's site template
templates/sandbox-alerts.yml.j2 (ds4_monitoring_alerts_template, issue 41): the role's, and a recording
rule of the site's, which Prometheus evaluates.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_host import install_prometheus, start_prometheus
from spark import sandbox_host
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
TESTS = Path(__file__).resolve().parent
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
PREFIX = f"mol-{os.environ['MOLECULE_SCENARIO_NAME']}-"
NAMES = ("spark01", "spark02", "spark03")
# Where the test's Prometheus runs, and its files there.
MONITOR = "spark01"
REMOTE = "/root/ds4-monitoring"
PROMETHEUS_API = "http://127.0.0.1:9090/api/v1"
# The live configuration's timings besides its intervals: every alert fires seconds after its condition
# (a newer release at once), and an alert on a counter clears a minute after it last rose.
# The sandbox's site template of the alert rules, found in the repository's templates/ beside playbooks/.
SITE_ALERTS = "sandbox-alerts.yml.j2"
SITE_RULE = "sandbox:ds4_spark_engine_up:sum"
LIVE = {
    "ds4_monitoring_alert_for": dict.fromkeys(
        yaml.safe_load((ROOT / "roles/ds4_monitoring/vars/main.yml").read_text())["_ds4_alert_for"], "4s"
    ),
    "ds4_monitoring_counter_window": "1m",
    "ds4_monitoring_metrics_stale_seconds": 30,
    "ds4_monitoring_update_days": 0,
}


@pytest.fixture(scope="module")
def sparks():
    return {name: sandbox_host(name) for name in NAMES}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("monitoring")


def generate(work, name, *extra):
    """monitoring.yml run as an operator runs it, into work/name; that directory."""
    out = work / name
    # Prometheus reaches each Spark's node_exporter by its container name on the scenario's network.
    targets = work / "targets.yml"
    targets.write_text(
        json.dumps({"sparks": {"hosts": {n: {"ds4_metrics_target": f"{PREFIX}{n}:9100"} for n in NAMES}}})
    )
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_FORCE_COLOR"}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [
        "ansible-playbook",
        "-i",
        str(INVENTORY),
        "-i",
        str(targets),
        str(ROOT / "playbooks/monitoring.yml"),
    ]
    cmd += ["-e", f"ds4_monitoring_dir={out}", *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]
    return out


def copy_in(local, remote):
    subprocess.run(
        ["podman", "cp", str(local), f"{PREFIX}{MONITOR}:{remote}"], check=True, capture_output=True
    )


def api(host, path):
    return json.loads(host.check_output(f"curl -fsS --max-time 5 '{PROMETHEUS_API}/{path}'"))["data"]


def query(host, expr):
    return api(host, "query?query=" + expr.replace(" ", "%20"))["result"]


def configurations(work):
    """(defaults, live): the configuration and rules generated with the defaults, and with the fast
    timings the tests watch alerts on."""
    defaults = generate(work, "defaults")
    live = generate(
        work,
        "live",
        "-e",
        "ds4_monitoring_scrape_interval=2s",
        "-e",
        "ds4_monitoring_evaluation_interval=2s",
        "-e",
        "ds4_monitoring_engine_down_for=10s",
        "-e",
        json.dumps(LIVE),
        "-e",
        f"ds4_monitoring_alerts_template={SITE_ALERTS}",
    )
    return defaults, live


@pytest.fixture(scope="module")
def prometheus(sparks, work):
    """Prometheus from Debian's package on spark01, started here on the live configuration."""
    host = sparks[MONITOR]
    install_prometheus(host)
    host.check_output(f"rm -rf {REMOTE} && mkdir -p {REMOTE}")
    defaults, live = configurations(work)
    copy_in(defaults, f"{REMOTE}/defaults")
    copy_in(TESTS / "ds4-alerts.promtool.yml", f"{REMOTE}/defaults/")
    copy_in(TESTS / "ds4-alerts-verify.promtool.yml", f"{REMOTE}/defaults/")
    copy_in(TESTS / "ds4-alerts-pair.promtool.yml", f"{REMOTE}/defaults/")
    copy_in(live, f"{REMOTE}/live")
    start_prometheus(host, "ds4-test-prometheus", REMOTE, 9090)
    yield host
    host.run("systemctl stop ds4-test-prometheus")


def test_promtool_accepts_the_configuration_and_the_rules(prometheus):
    # The live rules: the role's 19 and the site template's one.
    for directory, count in (("defaults", 19), ("live", 20)):
        config = prometheus.run(f"promtool check config {REMOTE}/{directory}/prometheus.yml")
        assert config.rc == 0 and "SUCCESS: 1 rule files found" in config.stdout, (
            config.stdout + config.stderr
        )
        rules = prometheus.run(f"promtool check rules {REMOTE}/{directory}/ds4-alerts.yml")
        assert rules.rc == 0 and f"SUCCESS: {count} rules found" in rules.stdout, rules.stdout + rules.stderr


def test_prometheus_evaluates_the_site_templates_rule(prometheus):
    """The site's recording rule, added to the role's rules by its template, is live: every Spark serves."""
    wait_for(
        f"{SITE_RULE} to count the three serving Sparks",
        lambda: [r["value"][1] for r in query(prometheus, SITE_RULE)] == ["3"],
        timeout=90,
    )


def test_promtool_rule_tests_pass_on_the_default_timings(prometheus):
    run = prometheus.run(
        f"cd {REMOTE}/defaults && promtool test rules ds4-alerts.promtool.yml ds4-alerts-verify.promtool.yml"
        " ds4-alerts-pair.promtool.yml"
    )
    assert run.rc == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_prometheus_scrapes_each_spark_and_sees_what_it_runs(prometheus, sparks):
    def all_up():
        targets = api(prometheus, "targets")["activeTargets"]
        return len(targets) == 3 and all(t["health"] == "up" for t in targets) and targets

    targets = wait_for("the three Sparks scraped", all_up, timeout=60)
    assert sorted(t["labels"]["spark"] for t in targets) == list(NAMES)
    assert {t["scrapeUrl"] for t in targets} == {f"http://{PREFIX}{n}:9100/metrics" for n in NAMES}
    wait_for("what each Spark runs", lambda: len(query(prometheus, "ds4_spark_info")) == 3, timeout=30)
    runs = {r["metric"]["spark"]: r["metric"] for r in query(prometheus, "ds4_spark_info")}
    for name, spark in sparks.items():
        stamp = json.loads(spark.file("/opt/ds4/current/.ds4-build.json").content_string)
        assert (runs[name]["release"], runs[name]["commit"]) == (stamp["release"], stamp["commit"])
    assert {(m["generation"], m["speculation"]) for m in runs.values()} == {("0731", "dspark")}
    # The update state is known from provisioning on, and so is each verified model file.
    known = query(prometheus, "ds4_spark_update_check_known == 1")
    assert sorted(r["metric"]["spark"] for r in known) == list(NAMES)
    verified = query(prometheus, "ds4_spark_weights_verified == 1")
    assert len(verified) == 6, verified
    # The engine's own series, through node_exporter: its port never left the Spark.
    inflight = query(prometheus, "ds4_requests_inflight")
    assert sorted(r["metric"]["spark"] for r in inflight) == list(NAMES)


def test_stopping_ds4_on_one_spark_fires_engine_down_for_it_alone(prometheus, sparks):
    def firing():
        alerts = api(prometheus, "alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "Ds4EngineDown" and a["state"] == "firing"]

    sparks["spark03"].check_output("systemctl stop ds4")
    try:
        alerts = wait_for("Ds4EngineDown to fire", firing, timeout=90)
        assert [a["labels"]["spark"] for a in alerts] == ["spark03"]
        assert alerts[0]["annotations"]["summary"] == "spark03: the ds4 engine is not serving"
        up = {r["metric"]["spark"]: r["value"][1] for r in query(prometheus, "ds4_spark_engine_up")}
        assert up == {"spark01": "1", "spark02": "1", "spark03": "0"}
    finally:
        sparks["spark03"].check_output("systemctl start ds4")
        # Put back whole: the engine's own series of spark03 scraped again, as the other tests read them.
        wait_for(
            "spark03's engine series scraped again",
            lambda: "spark03" in {r["metric"]["spark"] for r in query(prometheus, "ds4_requests_inflight")},
            timeout=120,
        )
    wait_for("Ds4EngineDown gone once spark03 serves", lambda: not firing(), timeout=90)
