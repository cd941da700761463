"""playbooks/monitoring.yml for a site's own Prometheus (issue 29): beside the whole prometheus.yml, a scrape
configuration file for scrape_config_files (no global section, the same jobs) and the same scrape
configurations and alert rules as the prometheus.prometheus role's variables, which Ansible loads back
unchanged (the annotations' Go templates included). The real Prometheus loads the file in the fleet
scenario (molecule/fleet/tests/test_monitoring_site.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


def ansible_playbook(*args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    work = tmp_path_factory.mktemp("site-prometheus")
    inventory = work / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "sparks": {
                    "hosts": {"s1": {"ds4_metrics_target": "s1.lan:9100"}, "s2": {"ansible_host": "10.0.0.2"}}
                },
                "gateways": {"hosts": {"gw": {"ansible_host": "10.0.0.9"}}},
            }
        )
    )
    out = work / "out"
    ansible_playbook(
        "-i",
        str(inventory),
        str(REPO / "playbooks/monitoring.yml"),
        "-e",
        f"ds4_monitoring_dir={out}",
        cwd=work,
    )
    return out


def load(path):
    return yaml.safe_load(path.read_text())


def test_the_scrape_file_has_the_whole_configurations_jobs_and_no_global_section(out):
    scrape = load(out / "ds4-scrape.yml")
    assert list(scrape) == ["scrape_configs"]
    whole = load(out / "prometheus.yml")
    assert scrape["scrape_configs"] == whole["scrape_configs"]
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert sorted(jobs) == ["ds4-gateway", "ds4-sparks"]
    # Each job its own interval: the alerts' timings do not hang on the site's global one.
    assert {job["scrape_interval"] for job in jobs.values()} == {"30s"}
    targets = [(c["targets"], c["labels"]) for c in jobs["ds4-sparks"]["static_configs"]]
    assert targets == [(["s1.lan:9100"], {"spark": "s1"}), (["10.0.0.2:9100"], {"spark": "s2"})]


def test_the_prometheus_roles_variables_load_back_as_the_files_say(out, tmp_path):
    loaded = tmp_path / "loaded.json"
    playbook = tmp_path / "load.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Load the variables as a site's playbook of the prometheus role does",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars_files": [str(out / "ds4-prometheus-role-vars.yml")],
                    "tasks": [
                        {
                            "name": "Write them as the role's templates would see them",
                            "ansible.builtin.copy": {
                                "content": "{{ {'scrape': prometheus_scrape_configs,"
                                " 'rules': prometheus_alert_rules} | to_json }}",
                                "dest": str(loaded),
                                "mode": "0644",
                            },
                        }
                    ],
                }
            ]
        )
    )
    ansible_playbook(
        "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), cwd=tmp_path
    )
    seen = json.loads(loaded.read_text())
    assert seen["scrape"] == load(out / "ds4-scrape.yml")["scrape_configs"]
    rules = [rule for group in load(out / "ds4-alerts.yml")["groups"] for rule in group["rules"]]
    assert seen["rules"] == rules
    assert any("{{ $labels.spark }}" in rule["annotations"]["summary"] for rule in seen["rules"])
