"""The site's own templates (issue 41): the repository's templates/ holds the sandbox's examples, which the
scenario's host_vars name (gw01: sandbox-haproxy.cfg.j2, spark01: sandbox-ds4.env.j2) and site.yml looks up
beside playbooks/, before the roles' own.

1. their effect is live: every answer through the gateway carries the site's header, over the role's whole
   configuration; spark01's engine runs with the site's variable, over the role's whole environment, and
   spark02, which names no template, with the role's alone;
2. a site's template that its program refuses is refused before it is written, and nothing changes: HAProxy's
   check refuses gw01's configuration, the environment file's check spark01's (in the service's preflight),
   logrotate spark02's rotation; each file stays as it was, and the services go on as they were.
"""

import hashlib
import json
import re

from nested import play as nested_play
from spark import forge, show

# test_gateway's autouse fixture client_tools comes with it: the forge trusts the gateway's certificate.
from test_gateway import CA, INVENTORY, KEY, ROOT, URL, client_tools  # noqa: F401

SITE_LINE = "DS4_SITE=sandbox"
FILES = {
    "gw01": ["/etc/haproxy/haproxy.cfg"],
    "spark01": ["/etc/ds4/ds4.env", "/etc/logrotate.d/ds4"],
    "spark02": ["/etc/ds4/ds4.env", "/etc/logrotate.d/ds4"],
}


def headers():
    """The headers of an answer through the gateway, lower-cased names."""
    done = forge(
        "curl", "-sS", "--max-time", "60", "--cacert", CA, "-H", f"Authorization: Bearer {KEY}",
        "-D", "-", "-o", "/dev/null", URL + "/v1/models", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line.split(":", 1) for line in done.stdout.splitlines()[1:] if ":" in line]
    return {name.strip().lower(): value.strip() for name, value in lines}


def engine_environment(host):
    pid = show(host, "ds4", "MainPID")["MainPID"]
    assert pid != "0", "ds4 is not running"
    # Read as the engine's user: root without CAP_SYS_PTRACE may not read another user's environment.
    user = host.check_output(f"ps -o user= -p {pid}").strip()
    return host.check_output(f"runuser -u {user} -- cat /proc/{pid}/environ | tr '\\0' '\\n'").splitlines()


def test_the_sites_templates_are_live_over_the_roles_own(hosts):
    assert headers().get("x-ds4-site") == "sandbox"
    config = hosts["gw01"].file("/etc/haproxy/haproxy.cfg").content_string
    # Extended, not replaced: the role's frontend is whole, with the site's line in it.
    assert "    http-response set-header X-Ds4-Site sandbox\n    default_backend ds4_sparks\n" in config
    assert "frontend ds4_metrics" in config

    assert SITE_LINE in engine_environment(hosts["spark01"])
    assert SITE_LINE not in engine_environment(hosts["spark02"])
    site = hosts["spark01"].file("/etc/ds4/ds4.env").content_string.splitlines()
    own = hosts["spark02"].file("/etc/ds4/ds4.env").content_string.splitlines()
    # The same lines but the site's and the drafter's: spark01 serves Vision-Exp, with its own drafter.
    assert SITE_LINE in site, site
    assert [line.split("=")[0] for line in set(own) - set(site)] == ["DS4_DSPARK_MODEL"], (own, site)


def state(hosts):
    """Each file's digest, and the services' main processes."""
    files = {
        (name, path): hashlib.sha256(hosts[name].file(path).content).hexdigest()
        for name, paths in FILES.items()
        for path in paths
    }
    processes = {name: show(hosts[name], "ds4", "MainPID") for name in ("spark01", "spark02")}
    processes["gw01"] = show(hosts["gw01"], "haproxy", "MainPID", "ExecMainStartTimestamp")
    return files, processes


def test_a_site_template_its_program_refuses_changes_nothing(hosts, tmp_path):
    # The site's templates as an operator breaks them: under the names the scenario's host_vars give, in a
    # site directory of their own (ds4_site_templates_dir, which replaces the repository's).
    site = tmp_path / "templates"
    site.mkdir()
    (site / "sandbox-haproxy.cfg.j2").write_text(
        "{% extends 'ds4-gateway.haproxy.cfg.j2' %}\n{% block ds4_frontend %}\n    http-request frobnicate\n"
        "{% endblock %}\n"
    )
    (site / "sandbox-ds4.env.j2").write_text("{% include 'ds4.env.j2' %}\nDS4 SITE sandbox\n")
    (site / "broken-logrotate.j2").write_text(
        "{% include 'logrotate.j2' %}\n/var/log/ds4/other.log {\n    dayly\n}\n"
    )
    # spark01's environment is refused in the preflight; spark02, which names no environment template, goes
    # on to its rotation, refused at its configure step.
    per_host = tmp_path / "site-templates.yml"
    per_host.write_text(
        json.dumps({"sparks": {"hosts": {"spark02": {"ds4_logrotate_template": "broken-logrotate.j2"}}}})
    )
    before = state(hosts)
    # Two runs: a play whose every host failed ends the whole run, and the gateway's play has gw01 alone.
    gateway = nested_play(
        ROOT / "playbooks" / "gateway.yml", "-l", "gw01", "-e", f"ds4_site_templates_dir={site}",
        inventory=INVENTORY,
    )  # fmt: skip
    assert gateway.rc != 0, gateway
    assert [r.name for r in gateway.failures("gw01")] == ["Configure HAProxy as the fleet's gateway"], gateway
    # haproxy -c -q says nothing but its status: the template's validation failed.
    assert gateway.failures("gw01")[0].msg == "failed to validate", gateway
    assert gateway.changed("gw01") == 0, gateway

    run = nested_play(
        ROOT / "playbooks" / "site.yml",
        "-l", "sparks",
        "-e", "ds4_release=v0.6.3",
        "-e", f"ds4_site_templates_dir={site}",
        # Not the record's check, which would remove the record of the last run for the new settings.
        "-e", "ds4_skip_when_unchanged=false",
        inventory=[INVENTORY, per_host],
    )  # fmt: skip
    assert run.rc != 0, run
    failed = {host: [r.name for r in run.failures(host)] for host in ("spark01", "spark02")}
    assert failed == {
        "spark01": ["Refuse an environment file that systemd would not read whole"],
        "spark02": ["Write the log rotation of the plain log file"],
    }, run
    assert re.fullmatch(
        f"{re.escape(str(site))}/sandbox-ds4.env.j2 \\(ds4_launch_env_template\\) renders an environment "
        "file systemd would not read whole: line [0-9]+: not NAME=VALUE",
        " ".join(run.failures("spark01")[0].msg.split()),
    ), run.failures("spark01")[0].msg
    assert "unknown option 'dayly'" in json.dumps(run.failures("spark02")[0].data)
    assert {host: run.changed(host) for host in run.stats} == {"spark01": 0, "spark02": 0}, run
    assert state(hosts) == before
    # The gateway still serves the site's configuration, each Spark behind it.
    assert headers().get("x-ds4-site") == "sandbox"


def test_a_site_template_named_as_the_roles_own_is_refused_and_nothing_changes(hosts, tmp_path):
    """Issue 55, point 10: a logrotate.j2 in the site's templates silently replaced the role's own (whose
    postrotate runs as root) while ds4_logrotate_template kept its default. Refused by name, both files
    named; spark02 changes nothing."""
    site = tmp_path / "templates"
    site.mkdir()
    (site / "logrotate.j2").write_text("/var/log/ds4/*.log {\n    postrotate\n        id\n    endscript\n}\n")
    before = state(hosts)
    run = nested_play(
        ROOT / "playbooks" / "site.yml", "-l", "spark02", "-e", "ds4_release=v0.6.3",
        "-e", f"ds4_site_templates_dir={site}", inventory=INVENTORY,
    )  # fmt: skip
    assert run.rc != 0, run
    refused = next((r.data["refused"] for r in run.results if r.data.get("refused")), [])
    said = f"ds4_logrotate_template names logrotate.j2, which is both the site's {site}/logrotate.j2 and "
    assert [m for m in refused if m.startswith(said)], refused
    assert {host: run.changed(host) for host in run.stats} == {"spark02": 0}, run
    assert state(hosts) == before
