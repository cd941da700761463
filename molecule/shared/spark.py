"""What the scenarios' tests read on a sandbox Spark through testinfra: the unit's properties, the release
a link names, the engine's answer, the journal. pyproject.toml puts this directory on pytest's path."""

import json

ROOT = "/opt/ds4"
API = "http://127.0.0.1:8000"
QUESTION = "What is the capital of France?"


def show(host, unit, *props):
    """systemctl show UNIT's PROPS, as a mapping."""
    out = host.check_output(f"systemctl show {unit} " + " ".join(f"--property={p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines())


def main_pid(host, unit="ds4.service"):
    return int(show(host, unit, "MainPID")["MainPID"])


def release(host, link="current"):
    """The release a link of /opt/ds4 names ("" when there is no such link)."""
    return host.run(f"readlink {ROOT}/{link}").stdout.strip().rsplit("/", 1)[-1]


def ask(host, question=QUESTION, max_tokens=64, check=True):
    """The engine's answer to QUESTION, asked on the Spark itself; None when it does not answer (check
    False), else the test fails."""
    body = json.dumps(
        {
            "model": "deepseek-v4-flash",
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": question}],
        }
    )
    done = host.run(
        f"curl -fsS --max-time 30 -H 'Content-Type: application/json' -d '{body}' {API}/v1/chat/completions"
    )
    if done.rc != 0:
        assert not check, f"the engine did not answer: {done.stderr}"
        return None
    return json.loads(done.stdout)["choices"][0]["message"]["content"]


def holds(host, check=True):
    """The stand-in engine's open holds: {name: {"reads": in-flight reads while held, "readers": the same
    per User-Agent, "requests": n}}; None when the engine does not answer (check False), else the test
    fails."""
    done = host.run(f"curl -fsS --max-time 5 {API}/standin/holds")
    if done.rc != 0:
        assert not check, f"the engine did not answer: {done.stderr}"
        return None
    return json.loads(done.stdout)


def journal(host, unit, since):
    """UNIT's journal lines since the unix time SINCE, as text."""
    return host.check_output(f"journalctl --no-pager -o cat -u {unit} --since @{since}")
