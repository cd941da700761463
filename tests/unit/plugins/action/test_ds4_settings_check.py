"""The action ds4_settings_check (plugins/action) in a playbook, as the gateway's preflight calls it: the
keys file, the certificate's files and the Sparks are what only the controller knows."""

import json
import os
import subprocess
from pathlib import Path

from settings_cases import SITE_ROLES, site_rounds

ROOT = Path(__file__).resolve().parents[4]
SECRET = "a-secret-with-a space"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Check the gateway's settings
      ds4.fleet.ds4_settings_check:
        roles: [ds4_gateway]
        gateway_sparks: "{{ sparks }}"
"""


def check(tmp_path, **values):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "vars.json").write_text(json.dumps({"sparks": ["spark01"], **values}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", "@vars.json", "play.yml"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return done.returncode, result, done.stdout


def test_keys_from_the_file_are_judged_with_the_list_and_named_by_position(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# two keys\n{'f' * 16}\n{SECRET}\n")
    rc, result, out = check(tmp_path, ds4_gateway_api_keys=["k" * 16], ds4_gateway_api_keys_file=str(keys))
    assert rc == 2 and result["failed"]
    assert result["refused"] == [
        "ds4_gateway_api_keys (with ds4_gateway_api_keys_file) has keys that are not 16 or more of "
        "A-Z a-z 0-9 . _ ~ + / = -: number(s) 3 of 3"
    ]
    assert SECRET not in out


def test_an_unreadable_keys_file_and_a_missing_certificate_are_named(tmp_path):
    rc, result, _ = check(
        tmp_path,
        ds4_gateway_api_keys=["k" * 16],
        ds4_gateway_api_keys_file=str(tmp_path / "gone.txt"),
        ds4_gateway_tls_cert=str(tmp_path / "gone.pem"),
        ds4_gateway_tls_key=str(tmp_path / "gone.key"),
        sparks=[],
    )
    assert rc == 2
    assert result["refused"] == [
        f"ds4_gateway_api_keys_file cannot be read on this controller: [Errno 2] No such file or directory: "
        f"'{tmp_path / 'gone.txt'}'",
        f'ds4_gateway_tls_cert names no file on this controller: "{tmp_path / "gone.pem"}"',
        f'ds4_gateway_tls_key names no file on this controller: "{tmp_path / "gone.key"}"',
        "ds4_target_hosts (sparks) names no host: the gateway would have no Spark to send requests to",
    ]


def test_usable_gateway_settings_pass(tmp_path):
    cert, key = tmp_path / "gw.pem", tmp_path / "gw.key"
    cert.write_text("cert\n")
    key.write_text("key\n")
    rc, result, _ = check(
        tmp_path,
        ds4_gateway_api_keys=["k" * 16],
        ds4_gateway_tls_cert=str(cert),
        ds4_gateway_tls_key=str(key),
    )
    assert rc == 0 and not result.get("failed"), result
    assert "ds4_gateway_api_keys" in result["checked"]


def test_every_round_of_bad_site_settings_is_refused_by_name(tmp_path):
    """Each round of tests/unit/settings_cases.py, as the site playbook's first task is given it: a play
    per round, the values typed as -e would give them (a JSON file), every one named in the refusal."""
    rounds = site_rounds()
    plays = []
    for number, values in enumerate(rounds):
        (tmp_path / f"round-{number}.json").write_text(json.dumps(values))
        plays.append(
            {
                "name": f"Round {number}",
                "hosts": "localhost",
                "gather_facts": False,
                "vars_files": [f"round-{number}.json"],
                "tasks": [
                    {
                        "name": "Refuse any setting of the site roles that cannot be used",
                        "ds4.fleet.ds4_settings_check": {"roles": SITE_ROLES},
                        "ignore_errors": True,
                    }
                ],
            }
        )
    (tmp_path / "rounds.yml").write_text(json.dumps(plays))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local", "rounds.yml"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)["plays"]
    assert len(rounds) > 10 and len(report) == len(rounds), done.stdout[-3000:]
    for number, (values, play) in enumerate(zip(rounds, report, strict=True)):
        result = play["tasks"][0]["hosts"]["localhost"]
        named = {message.split(" ")[0].split("[")[0].split("=")[0] for message in result.get("refused", [])}
        assert result.get("failed") and sorted(set(values) - named) == [], (number, result)


def test_a_spark_address_that_would_add_to_haproxy_s_configuration_is_refused(tmp_path):
    """ansible_host (or ds4_gateway_backend_address) of each Spark goes into a server line of HAProxy: a
    newline would add a server of the attacker's, refused before anything on the gateway changes."""
    inventory = {
        "all": {
            "hosts": {"localhost": {"ansible_connection": "local"}},
            "children": {
                "sparks": {
                    "hosts": {
                        "spark01": {"ansible_host": "10.0.0.1\n    server evil 203.0.113.9:80"},
                        "spark02": {"ds4_gateway_backend_address": "{{ '10.0.0.2 backup' }}"},
                        # Templated with the Spark's own variables, as the template reads it.
                        "spark03": {
                            "site_domain": "lab.example",
                            "ds4_gateway_backend_address": "{{ inventory_hostname }}.{{ site_domain }}",
                        },
                    }
                }
            },
        }
    }
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace('"{{ sparks }}"', "\"{{ groups['sparks'] }}\""))
    (tmp_path / "vars.json").write_text(json.dumps({"ds4_gateway_api_keys": ["k" * 16]}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", "inventory.json", "-e", "@vars.json", "play.yml"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["refused"] == [
        "ansible_host of spark01 must be a host name, an IPv4 or an IPv6 address (it is the gateway's server "
        'line for the Spark); got "10.0.0.1\\n    server evil 203.0.113.9:80"',
        "ds4_gateway_backend_address of spark02 must be a host name, an IPv4 or an IPv6 address (it is the "
        'gateway\'s server line for the Spark); got "10.0.0.2 backup"',
    ]


def test_no_secret_bearing_value_reaches_the_play_s_output(tmp_path):
    """The action's refusals in a playbook, at -vvv: a marker in a token given as a list, in ds4_extra_env
    given as a string and in a URL's password is nowhere in what ansible-playbook prints."""
    marker = "Mk-7f3e9-SECRET"
    values = {
        "ds4_hf_token": [marker],
        "ds4_extra_env": f"OPENAI_API_KEY={marker}",
        "ds4_proxy_env": [f"http://u:{marker}@proxy:3128"],
        "ds4_hf_endpoint": f"http://u:{marker}@hub.example/a b",
        "ds4_engine_repo": f" https://u:{marker}@forge/ds4.git",
    }
    (tmp_path / "vars.json").write_text(json.dumps(values))
    (tmp_path / "play.yml").write_text(
        PLAYBOOK.replace("roles: [ds4_gateway]", f"roles: {json.dumps(SITE_ROLES)}").replace(
            '        gateway_sparks: "{{ sparks }}"\n', ""
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    command = ["ansible-playbook", "-vvv", "-i", "localhost,", "-c", "local", "-e", "@vars.json", "play.yml"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "ds4_extra_env must be a mapping" in out, out[-3000:]
    assert marker not in out.replace("@vars.json", "")


def test_a_site_template_is_found_beside_the_playbook_and_its_content_is_an_input(tmp_path):
    """A site's template (issue 41): refused up front where it is not, naming the variable and the paths
    looked in; where it is, the run's fingerprint follows its content, so that a changed one makes the run
    whole."""
    rc, result, _ = check(
        tmp_path, ds4_gateway_api_keys=["k" * 16], ds4_gateway_config_template="site.cfg.j2"
    )
    assert rc == 2
    assert result["refused"] == [
        "ds4_gateway_config_template names site.cfg.j2, which is none of: "
        f"{tmp_path / 'templates/site.cfg.j2'}, {ROOT / 'roles/ds4_gateway/templates/site.cfg.j2'}"
    ]

    def fingerprint():
        rc, result, _ = check(
            tmp_path, ds4_gateway_api_keys=["k" * 16], ds4_gateway_config_template="site.cfg.j2"
        )
        assert rc == 0, result
        return result["fingerprint"]

    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/site.cfg.j2").write_text("{% extends 'ds4-gateway.haproxy.cfg.j2' %}\n")
    first = fingerprint()
    assert fingerprint() == first
    (tmp_path / "templates/site.cfg.j2").write_text("{% extends 'ds4-gateway.haproxy.cfg.j2' %}\n# more\n")
    assert fingerprint() != first
