"""The day-two playbooks on the pair that converge left serving (issue 42): spark04 coordinating, spark05 its
worker, on v0.6.5, with the gateway gw01 in front.

- the gateway's backend holds the coordinator alone, and a request through the gateway is answered by the
  pair;
- status.yml shows the pair as one row, `pair01 (spark04+spark05)`, with both members' state;
- upgrade.yml to v0.6.6 (the stand-in's release that answers "Lyon", failing the smoke test): the pair is
  one unit and so the canary; both members switch, the worker restarts first, the smoke test through the
  coordinator fails, both roll back to v0.6.5 and the pair serves again; the worker never leaves the gateway,
  as it was never in it; a run on one member alone is refused;
- remove.yml on one member alone is refused, naming the other; on both it takes ds4 off both members and
  leaves nothing of the pair's units (ends_scenario).
The playbooks run nested, as an operator runs them (molecule/shared/nested.py).
"""

import json
import os
from pathlib import Path

import pytest
from members import COORDINATOR, UNITS, WORKER
from nested import play
from spark import API, forge, haproxy, sandbox_host, show

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
KEY = "ds4-test-key-0123456789abcdef"
NETPLAN_FILE = "/etc/netplan/60-ds4-pair-link.yaml"
QUESTION = "What is the capital of France? Answer in one sentence."
BODY = json.dumps(
    {"model": "deepseek-v4-flash", "max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]}
)


@pytest.fixture(scope="module")
def hosts():
    return {name: sandbox_host(name) for name in ("gw01", COORDINATOR, WORKER)}


def playbook(name, *args):
    return play(ROOT / "playbooks" / name, *args, inventory=INVENTORY)


def pair_state(hosts):
    """Each member's release (current) and its unit's main process; the pair's answer on the coordinator."""
    state = {}
    for name, unit in UNITS.items():
        host = hosts[name]
        props = show(host, unit, "ActiveState", "MainPID")
        current = host.check_output("readlink /opt/ds4/current").rsplit("/", 1)[-1]
        state[name] = (current, props["ActiveState"], props["MainPID"])
    done = hosts[COORDINATOR].run(
        f"curl -fsS --max-time 60 -H 'Content-Type: application/json' -d '{BODY}' {API}/v1/chat/completions"
    )
    state["answer"] = json.loads(done.stdout)["choices"][0]["message"]["content"] if done.rc == 0 else None
    return state


def through_gateway():
    """The pair's answer through the gateway, asked from the forge with the test key, as a client asks:
    (HTTP code, body). The gateway's certificate is its own self-signed one, not checked here."""
    done = forge("curl", "-sS", "-k", "--max-time", "120", "-o", "/tmp/pair-body", "-w", "%{http_code}",
                 "-H", "Content-Type: application/json", "-H", f"Authorization: Bearer {KEY}", "-d", BODY,
                 "https://gw01:8443/v1/chat/completions", timeout=180)  # fmt: skip
    assert done.stdout.isdigit() and int(done.stdout), f"no answer from the gateway: {done.stderr}"
    return int(done.stdout), forge("cat", "/tmp/pair-body").stdout


def servers(hosts):
    """The gateway backend's servers: name -> HAProxy's status."""
    lines = [line for line in haproxy(hosts["gw01"], "show stat ds4_sparks 4 -1").splitlines() if line]
    names = lines[0][2:].split(",")
    rows = [dict(zip(names, line.split(","), strict=False)) for line in lines[1:]]
    return {row["svname"]: row["status"] for row in rows}


def test_the_gateway_sends_the_pairs_requests_to_its_coordinator_alone(hosts):
    assert servers(hosts) == {COORDINATOR: "UP"}
    code, body = through_gateway()
    assert code == 200, body
    assert "Paris" in json.loads(body)["choices"][0]["message"]["content"]


def test_status_shows_the_pair_as_one_row_with_both_members(hosts, tmp_path):
    path = tmp_path / "status.json"
    run = playbook("status.yml", "-e", f"ds4_status_json={path}")
    assert run.rc == 0, run
    records = json.loads(path.read_text())["hosts"]
    assert [record["host"] for record in records] == ["pair01"]
    (pair,) = records
    # A pipeline pair (ds4_pairs' default mode): no tensor transport to say.
    assert pair["pair"] == {
        "name": "pair01",
        "coordinator": COORDINATOR,
        "worker": WORKER,
        "mode": "pipeline",
        "transport": None,
    }
    assert [(m["host"], m["role"], m["service"], m["release"]) for m in pair["members"]] == [
        (COORDINATOR, "coordinator", "active", "v0.6.5"),
        (WORKER, "worker", "active", "v0.6.5"),
    ]
    assert (pair["service"], pair["release"], pair["answering"], pair["notes"]) == (
        "active",
        "v0.6.5",
        True,
        [],
    )
    table = run.result("Show the fleet", COORDINATOR).data["msg"]
    assert any(line.startswith("pair01 (spark04+spark05)  active") for line in table), table


def test_an_upgrade_of_one_member_alone_is_refused_and_changes_nothing(hosts):
    before = pair_state(hosts)
    run = playbook("upgrade.yml", "-e", "ds4_release=v0.6.6", "-l", WORKER)
    assert run.rc == 2, run
    refusal = run.result("Refuse a run that takes one member of a pair without the other", WORKER)
    assert "this run takes spark05 without spark04; a pair is upgraded as one" in refusal.msg
    assert pair_state(hosts) == before


def test_a_pair_failing_its_smoke_test_is_rolled_back_on_both_members(hosts, tmp_path):
    before = pair_state(hosts)
    assert (
        before[COORDINATOR][:2] == before[WORKER][:2] == ("v0.6.5", "active") and "Paris" in before["answer"]
    )
    summary = tmp_path / "summary.json"
    run = playbook("upgrade.yml", "-e", "ds4_release=v0.6.6", "-e", f"ds4_upgrade_summary_json={summary}")
    assert run.rc == 2, run
    # One unit, the canary, both members in its batch.
    plan = run.result("Say how the Sparks will be switched", COORDINATOR).data["msg"]
    assert plan == "switching 1 unit(s) in 1 batch(es): [pair01 (spark04+spark05)]", plan
    # The smoke question was asked of the coordinator alone: in the switch, then of the restored pair.
    smoke = [r for r in run.of(task="Ask the engine the smoke question") if not r.skipped]
    assert [r.host for r in smoke] == [COORDINATOR, COORDINATOR], smoke
    assert smoke[0].failed and "Lyon" in smoke[0].msg
    worker = run.result(
        "Fail the worker, as its pair's smoke test through the coordinator did not pass", WORKER
    )
    assert "a pair switches and rolls back as one" in worker.msg
    # Both rolled back to v0.6.5 on new processes, and the pair answers again.
    after = pair_state(hosts)
    for name in (COORDINATOR, WORKER):
        assert after[name][:2] == ("v0.6.5", "active") and after[name][2] != before[name][2], (before, after)
    assert "Paris" in after["answer"]
    hosts_summary = {h["host"]: h for h in json.loads(summary.read_text())["hosts"]}
    (pair,) = hosts_summary.values()
    assert [(m["host"], m["upgrade"]["outcome"]) for m in pair["members"]] == [
        (COORDINATOR, "rolled back"),
        (WORKER, "rolled back"),
    ]
    # The worker was never a server of the gateway; the coordinator is back in it.
    assert servers(hosts) == {COORDINATOR: "UP"}


@pytest.mark.ends_scenario
def test_remove_takes_the_pair_off_both_members_and_refuses_one_alone(hosts):
    before = pair_state(hosts)
    alone = playbook("remove.yml", "-l", WORKER)
    assert alone.rc == 2, alone
    refusal = alone.result(
        "Refuse to remove one member of a pair without the other, unless the operator says so", WORKER
    )
    assert "spark05 is the worker of the pair pair01 and its other member spark04" in refusal.msg
    assert pair_state(hosts) == before

    # A member whose link ds4_pair_link_manage addressed holds the link's netplan file; the sandbox has no
    # netplan, so it is placed here, and the removal takes it off.
    for name in UNITS:
        hosts[name].check_output(f"install -D -m 600 /dev/null {NETPLAN_FILE}")
    both = playbook("remove.yml", "-l", f"{COORDINATOR},{WORKER}", "-e", "ds4_remove_force=true")
    assert both.rc == 0, both
    for name, unit in UNITS.items():
        host = hosts[name]
        assert show(host, unit, "LoadState")["LoadState"] == "not-found", name
        paths = ("/opt/ds4", "/etc/ds4", "/usr/local/lib/ds4", f"/etc/systemd/system/{unit}", NETPLAN_FILE)
        for path in paths:
            assert not host.file(path).exists, (name, path)
        assert not host.user("ds4").exists
