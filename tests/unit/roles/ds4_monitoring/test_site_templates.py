"""A site's alert rules through playbooks/monitoring.yml (issue 41): ds4_monitoring_alerts_template names a
template in the site's templates/ (here the repository's, beside playbooks/, as Ansible's playbook_dir
leads there), which extends the role's rules; a template that renders rules Prometheus would refuse, or
one that is not there, is refused before any file is written. The fleet scenario's Prometheus loads the
example (molecule/fleet/tests/test_monitoring.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent
EXAMPLE = "sandbox-alerts.yml.j2"
FILES = ["ds4-alerts.yml", "ds4-prometheus-role-vars.yml", "ds4-scrape.yml", "prometheus.yml"]


def monitoring(work, *extra):
    """monitoring.yml as an operator runs it, into work/out: the finished process."""
    inventory = work / "hosts.yml"
    inventory.write_text(json.dumps({"sparks": {"hosts": {"s1": {"ansible_host": "10.0.0.1"}}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks/monitoring.yml")]
    cmd += ["-e", f"ds4_monitoring_dir={work / 'out'}", *extra]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    work = tmp_path_factory.mktemp("site-alerts")
    done = monitoring(work, "-e", f"ds4_monitoring_alerts_template={EXAMPLE}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work / "out"


def test_the_sites_template_extends_the_roles_rules(extended):
    rules = yaml.safe_load((extended / "ds4-alerts.yml").read_text())
    names = [group["name"] for group in rules["groups"]]
    own = yaml.safe_load(
        subprocess.run(
            ["grep", "-c", "^  - name: ", str(REPO / "roles/ds4_monitoring/templates/ds4-alerts.yml.j2")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert len(names) == own + 1 and names[-1] == "sandbox-site", names
    assert rules["groups"][-1]["rules"] == [
        {"record": "sandbox:ds4_spark_engine_up:sum", "expr": "sum(ds4_spark_engine_up)"}
    ]
    # The prometheus.prometheus role's variables carry the site's rule too.
    role_vars = yaml.safe_load((extended / "ds4-prometheus-role-vars.yml").read_text())
    assert role_vars["prometheus_alert_rules"][-1]["record"] == "sandbox:ds4_spark_engine_up:sum"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_rules_prometheus_would_refuse_are_refused_before_any_file_is_written(tmp_path):
    site = tmp_path / "site"
    write(
        site / "broken.yml.j2",
        "{% include 'ds4-alerts.yml.j2' %}\n  - name: broken\n    rules:\n      - alert: NoExpr\n",
    )
    # A file left by an earlier run is not touched.
    write(tmp_path / "out" / "ds4-alerts.yml", "earlier\n")
    done = monitoring(
        tmp_path, "-e", f"ds4_site_templates_dir={site}", "-e", "ds4_monitoring_alerts_template=broken.yml.j2"
    )
    assert done.returncode != 0
    said = " ".join(done.stdout.split())
    assert (
        f"{site}/broken.yml.j2 (ds4_monitoring_alerts_template) renders rules Prometheus would refuse" in said
    )
    assert "group broken rule 1 (NoExpr) has no expr" in said, said[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ds4-alerts.yml"]
    assert (tmp_path / "out" / "ds4-alerts.yml").read_text() == "earlier\n"


def test_a_template_that_is_not_there_is_refused_naming_the_variable_and_the_paths(tmp_path):
    done = monitoring(tmp_path, "-e", "ds4_monitoring_alerts_template=mine.yml.j2")
    assert done.returncode != 0
    looked = ", ".join(
        str(REPO / part / "mine.yml.j2")
        for part in ("playbooks/templates", "templates", "roles/ds4_monitoring/templates")
    )
    said = " ".join(done.stdout.split())
    assert f"ds4_monitoring_alerts_template names mine.yml.j2, which is none of: {looked}" in said, said[
        -3000:
    ]
    assert not (tmp_path / "out").exists()
