"""Monitoring that joins what a site already runs (issue 29): its own Prometheus, its own node_exporter.

On the fleet test_fleet.py leaves serving:
- a site's Prometheus (Debian's package from trixie: 2.43 or later reads scrape_config_files; bookworm's is
  2.42) in spark02 loads monitoring.yml's ds4-scrape.yml through scrape_config_files beside its own job and
  its own global section, and ds4-alerts.yml through rule_files, and scrapes the three Sparks;
- a Spark whose node_exporter is the site's (its own /etc/default file and textfile directory) run with
  ds4_node_exporter_manage false keeps that file byte for byte and its exporter running, and gets ds4.prom
  in the site's textfile directory;
- a port another program holds is refused before anything on the Spark changes.
Each test puts its Spark back as converge left it.
"""

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from nested import play
from spark import main_pid, route_address, sandbox_host
from test_monitoring import NAMES, PREFIX, generate
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"])
# The site's Prometheus, apart from test_monitoring's (spark01, Debian bookworm's package).
SITE_MONITOR = "spark02"
SITE_DIR = "/root/ds4-site"
SITE_APT = "/root/ds4-site-apt"
SITE_PORT = 9092
# The Spark whose node_exporter is the site's own.
SITE_SPARK = "spark03"
EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
EXPORTER_UNIT = "prometheus-node-exporter.service"
WATCHDOG_UNIT = "/etc/systemd/system/ds4-watchdog.service"
SITE_TEXTFILE = "/srv/site-textfile"
REFUSAL = "Refuse a node_exporter port another program holds, or a site's textfile directory that is missing"
SITE_EXPORTER_ARGS = (
    "# The site's own node_exporter settings, not ds4-fleet's.\n"
    f'ARGS="--web.listen-address=:9100 --collector.textfile.directory={SITE_TEXTFILE}"\n'
)


@pytest.fixture(scope="module")
def sparks():
    return {name: sandbox_host(name) for name in NAMES}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("monitoring-site")


def copy_to(name, local, remote):
    """LOCAL (a file on the controller) to REMOTE in the Spark NAME."""
    subprocess.run(["podman", "cp", str(local), f"{PREFIX}{name}:{remote}"], check=True, capture_output=True)


def packages(host):
    return set(host.check_output("dpkg-query -W -f '${Package}\\n'").split())


def sha256(host, path):
    return hashlib.sha256(host.file(path).content).hexdigest()


def exporter_page(host):
    """node_exporter's page, or "" while nothing listens: `systemctl restart` returns once it was started,
    before it listens (a fresh clone's run met the refused connection inside a wait)."""
    done = host.run(f"curl -fsS --max-time 5 http://{route_address(host)}:9100/metrics")
    return done.stdout if done.rc == 0 else ""


def provision_service(*args):
    """site.yml on SITE_SPARK, its ds4_service role only (a run with --tags: never recorded, never ended
    early), as an operator changes one role's settings."""
    return play(ROOT / "site.yml", "--tags", "ds4_service", "-l", SITE_SPARK, *args, inventory=INVENTORY)


def apt_trixie(host, command):
    """apt-get COMMAND with trixie as the only source, in lists of its own: nothing of the Spark's own
    sources changes, and its other packages stay bookworm's."""
    options = (
        f"-o Dir::Etc::SourceList={SITE_APT}/sources.list -o Dir::Etc::SourceParts=/nonexistent"
        f" -o Dir::State::Lists={SITE_APT}/lists -o Dir::Cache::Archives={SITE_APT}/archives"
        " -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache="
    )
    return host.run(f"DEBIAN_FRONTEND=noninteractive apt-get -q -y {options} {command}")


@pytest.fixture(scope="module")
def site_prometheus(sparks, work):
    """A site's Prometheus in SITE_MONITOR: its own prometheus.yml (its global section, its own job), the
    ds4 files by scrape_config_files and rule_files; removed again after."""
    host = sparks[SITE_MONITOR]
    files = generate(work, "site", "-e", "ds4_monitoring_scrape_interval=2s")
    mirror = (
        host.check_output(
            "sed -n 's|^deb \\(http[^ ]*\\) bookworm .*|\\1|p' /etc/apt/sources.list | head -n 1"
        ).strip()
        or "http://deb.debian.org/debian"
    )
    host.check_output(f"mkdir -p {SITE_APT}/lists/partial {SITE_APT}/archives/partial {SITE_DIR}")
    before = packages(host)
    host.check_output(f"echo {shlex.quote(f'deb {mirror} trixie main')} > {SITE_APT}/sources.list")
    try:
        for step in ("update", "install --no-install-recommends prometheus"):
            done = apt_trixie(host, step)
            assert done.rc == 0, done.stdout[-2000:] + done.stderr[-2000:]
        # The package starts its own on its default configuration: the site's runs here instead.
        host.check_output("systemctl disable --now prometheus.service")
        config = {
            "global": {"scrape_interval": "1m", "evaluation_interval": "1m"},
            "scrape_config_files": [f"{SITE_DIR}/ds4-scrape.yml"],
            "rule_files": [f"{SITE_DIR}/ds4-alerts.yml"],
            "scrape_configs": [
                {"job_name": "site-prometheus", "static_configs": [{"targets": [f"127.0.0.1:{SITE_PORT}"]}]}
            ],
        }
        (work / "site-prometheus.yml").write_text(yaml.safe_dump(config))
        copy_to(SITE_MONITOR, work / "site-prometheus.yml", f"{SITE_DIR}/prometheus.yml")
        for name in ("ds4-scrape.yml", "ds4-alerts.yml"):
            copy_to(SITE_MONITOR, files / name, f"{SITE_DIR}/{name}")
        checked = host.run(f"promtool check config {SITE_DIR}/prometheus.yml")
        assert checked.rc == 0, checked.stdout + checked.stderr
        host.check_output(
            f"systemd-run --unit=ds4-test-prometheus-site prometheus --config.file={SITE_DIR}/prometheus.yml"
            f" --storage.tsdb.path={SITE_DIR}/data --web.listen-address=127.0.0.1:{SITE_PORT}"
        )
        wait_for(
            "the site's Prometheus ready",
            lambda: host.run(f"curl -fsS --max-time 5 http://127.0.0.1:{SITE_PORT}/-/ready").rc == 0,
            timeout=60,
        )
        yield host, files
    finally:
        host.run("systemctl stop ds4-test-prometheus-site")
        host.run("systemctl reset-failed ds4-test-prometheus-site")
        # Put back: exactly the packages this install added, and the files of the test.
        added = sorted(packages(host) - before)
        purged = apt_trixie(host, "purge " + " ".join(added)) if added else None
        host.run(f"rm -rf {SITE_APT} {SITE_DIR}")
        assert purged is None or purged.rc == 0, purged.stdout[-2000:] + purged.stderr[-2000:]
        assert packages(host) == before


def site_api(host, path):
    return json.loads(
        host.check_output(f"curl -fsS --max-time 5 'http://127.0.0.1:{SITE_PORT}/api/v1/{path}'")
    )["data"]


def test_a_sites_prometheus_loads_the_scrape_file_and_the_rules_and_scrapes_the_sparks(site_prometheus):
    host, files = site_prometheus
    assert "global" not in yaml.safe_load((files / "ds4-scrape.yml").read_text())
    assert host.check_output("prometheus --version").split()[2] >= "2.43"

    def sparks_up():
        targets = [
            t for t in site_api(host, "targets")["activeTargets"] if t["labels"]["job"] == "ds4-sparks"
        ]
        return len(targets) == 3 and all(t["health"] == "up" for t in targets) and targets

    targets = wait_for("the three Sparks scraped through scrape_config_files", sparks_up, timeout=60)
    assert sorted(t["labels"]["spark"] for t in targets) == list(NAMES)
    # The ds4 job's own interval, not the site's global minute.
    assert {t["scrapeInterval"] for t in targets} == {"2s"}
    jobs = {t["labels"]["job"] for t in site_api(host, "targets")["activeTargets"]}
    assert jobs == {"ds4-sparks", "site-prometheus"}

    def info():
        return site_api(host, "query?query=ds4_spark_info")["result"]

    runs = wait_for("what each Spark runs", lambda: len(info()) == 3 and info(), timeout=30)
    assert sorted(r["metric"]["spark"] for r in runs) == list(NAMES)
    rules = yaml.safe_load((files / "ds4-alerts.yml").read_text())["groups"]
    loaded = site_api(host, "rules")["groups"]
    # Every group of the file with all its rules (the API lists the groups by name).
    assert sorted((g["name"], len(g["rules"])) for g in loaded) == sorted(
        (g["name"], len(g["rules"])) for g in rules
    )


def test_a_site_owned_node_exporter_is_kept_and_gets_the_ds4_textfile(sparks, work):
    host = sparks[SITE_SPARK]
    original = host.file(EXPORTER_DEFAULTS).content
    watchdog = host.file(WATCHDOG_UNIT).content
    try:
        # The site's own exporter: its own settings file and textfile directory, with a file of its own.
        host.check_output(f"mkdir -p {SITE_TEXTFILE} && echo 'site_backup_ok 1' > {SITE_TEXTFILE}/site.prom")
        (work / "site-exporter").write_text(SITE_EXPORTER_ARGS)
        copy_to(SITE_SPARK, work / "site-exporter", EXPORTER_DEFAULTS)
        host.check_output(f"systemctl restart {EXPORTER_UNIT}")
        wait_for("the site's exporter serving", lambda: "site_backup_ok 1" in exporter_page(host), timeout=30)
        before, pid = sha256(host, EXPORTER_DEFAULTS), main_pid(host, EXPORTER_UNIT)

        run = provision_service(
            "-e", "ds4_node_exporter_manage=false", "-e", f"ds4_node_exporter_textfile_dir={SITE_TEXTFILE}"
        )
        assert run.rc == 0, run
        assert sha256(host, EXPORTER_DEFAULTS) == before
        assert main_pid(host, EXPORTER_UNIT) == pid, "the site's node_exporter was restarted"
        assert run.result(
            "Point node_exporter at its listen addresses and the watchdog's metrics", SITE_SPARK
        ).skipped
        wait_for(
            "ds4.prom in the site's textfile directory",
            lambda: "ds4_spark_info{" in host.run(f"cat {SITE_TEXTFILE}/ds4.prom").stdout,
            timeout=60,
        )
        page = exporter_page(host)
        assert "site_backup_ok 1" in page and "ds4_spark_info{" in page
        assert "ds4_spark_engine_up 1" in page
    finally:
        # Put back: the role's own file and textfile directory, the exporter and the watchdog on them.
        (work / "exporter-defaults").write_bytes(original)
        copy_to(SITE_SPARK, work / "exporter-defaults", EXPORTER_DEFAULTS)
        host.check_output(f"rm -rf {SITE_TEXTFILE}")
        back = provision_service()
        host.check_output(f"systemctl restart {EXPORTER_UNIT}")
        assert back.rc == 0, back
    assert host.file(WATCHDOG_UNIT).content == watchdog
    assert host.file(EXPORTER_DEFAULTS).content == original
    wait_for("the ds4 series served again", lambda: "ds4_spark_info{" in exporter_page(host), timeout=60)


def test_a_port_another_program_holds_is_refused_before_anything_changes(sparks):
    host = sparks[SITE_SPARK]
    host.check_output("systemd-run --unit=ds4-test-squatter python3 -m http.server 9109 --bind 0.0.0.0")
    try:
        wait_for(
            "the squatter listening", lambda: host.run("ss -Hltn 'sport = :9109'").stdout.strip(), timeout=30
        )
        squatter = main_pid(host, "ds4-test-squatter.service")
        before = {path: sha256(host, path) for path in (EXPORTER_DEFAULTS, WATCHDOG_UNIT)}
        pid = main_pid(host, EXPORTER_UNIT)

        run = provision_service("-e", "ds4_node_exporter_port=9109")
        assert run.rc != 0, run
        [failure] = run.failures(SITE_SPARK)
        assert failure.name == REFUSAL
        assert failure.msg.startswith(
            f"ds4_node_exporter_port 9109 is held by pid {squatter} (/usr/bin/python3"
        )
        assert "ds4_node_exporter_manage: false" in failure.msg
        # Refused in site.yml's pre_tasks, before the first role (the build, the weights) ran at all.
        assert not [r for r in run.of(SITE_SPARK) if r.role and "ds4_preflight" in r.role]
        assert {path: sha256(host, path) for path in before} == before
        assert main_pid(host, EXPORTER_UNIT) == pid
    finally:
        host.run("systemctl stop ds4-test-squatter")
        host.run("systemctl reset-failed ds4-test-squatter")
