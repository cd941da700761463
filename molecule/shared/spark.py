"""What the scenarios' tests read on a sandbox host through testinfra: the host by its name, the unit's
properties, the release a link names, the engine's answer, the journal, a gateway's HAProxy; and commands
in the scenario's forge. pyproject.toml puts this directory on pytest's path."""

import json
import os
import subprocess

import testinfra
from nested import PROJECT
from waits import wait_for

ROOT = "/opt/ds4"
SSH_CONFIG = PROJECT / ".sandbox" / "ssh" / "config"
API = "http://127.0.0.1:8000"
QUESTION = "What is the capital of France?"
# One command to HAProxy's runtime API (its first argument) in a gateway, without the collection: its answer.
HAPROXY_RUNTIME = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_UNIX); s.connect('/run/haproxy/admin.sock')\n"
    "s.sendall(sys.argv[1].encode()+b'\\n'); out=b''\n"
    "while (c:=s.recv(65536)): out+=c\n"
    "sys.stdout.write(out.decode())\n"
)


def container(name):
    """The podman container of the scenario's host NAME (spark01, gw01, forge)."""
    return f"mol-{os.environ['MOLECULE_SCENARIO_NAME']}-{name}"


def sandbox_host(name):
    """The scenario's host NAME, as testinfra reaches it: over SSH, by its container's name in the sandboxes'
    ssh_config (tests/sandbox/sandbox.py), as the verifier's own `host` does (.config/molecule/config.yml)."""
    return testinfra.get_host(f"ssh://{container(name)}", ssh_config=str(SSH_CONFIG))


def forge(*cmd, check=False, timeout=120, stdin=None):
    """A command in the scenario's forge (a host that is neither a gateway nor a Spark), STDIN its input:
    the completed process. Podman's own failures (exit 125 to 127, seen under heavy load) are not the
    command's: they fail here, saying so."""
    feed = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
    done = subprocess.run(
        ["podman", "exec", *(["-i"] if stdin is not None else []), container("forge"), *cmd],
        **feed,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
    assert done.returncode < 125, f"podman exec in the forge failed: {done.returncode} {done.stderr}"
    return done


def haproxy(gateway, command):
    """The answer of HAProxy's runtime API on GATEWAY (a testinfra host) to COMMAND."""
    return gateway.check_output("python3 -c %s %s", HAPROXY_RUNTIME, command)


def show(host, unit, *props):
    """systemctl show UNIT's PROPS, as a mapping."""
    out = host.check_output(f"systemctl show {unit} " + " ".join(f"--property={p}" for p in props))
    return dict(line.split("=", 1) for line in out.splitlines())


def failed_for_good(host, timeout, unit="ds4.service"):
    """Wait until UNIT is failed and no restart is scheduled (not "auto-restart"): at its start limit. Its
    Result does not say so on the Sparks' systemd (it keeps the last run's: exit-code, signal); only the
    journal's "Start request repeated too quickly" does."""
    wait_for(
        f"{unit} at its start limit",
        lambda: (
            show(host, unit, "ActiveState", "SubState") == {"ActiveState": "failed", "SubState": "failed"}
        ),
        timeout=timeout,
    )


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


# A stranger's engine (issue 40): another user's process that answers on the engine's port as the engine
# does (its models, a Paris answer to anything), on the address it is given, and writes each request it
# receives to a file.
IMPOSTOR = """
import http.server, json, sys
class Engine(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        with open(sys.argv[1], "a") as seen:
            seen.write(self.command + " " + self.path + "\\n")
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.answer({"object": "list", "data": [{"id": "deepseek-v4-flash", "object": "model"}]})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer({"choices": [{"message": {"role": "assistant", "content": "Paris."}}]})
http.server.ThreadingHTTPServer((sys.argv[2], 8000), Engine).serve_forever()
"""
IMPOSTOR_LOG = "/tmp/impostor.log"
IMPOSTOR_UNIT = "test-impostor"


def start_impostor(host, address):
    """Start the stranger as user nobody in a transient unit, listening on ADDRESS:8000 and writing down
    what it receives in IMPOSTOR_LOG (emptied first); stop_impostor() ends it."""
    host.check_output("install -o nobody -m 0644 /dev/null %s", IMPOSTOR_LOG)
    host.check_output(
        "systemd-run --unit=%s --uid=nobody --gid=nogroup python3 -c %s %s %s",
        IMPOSTOR_UNIT,
        IMPOSTOR,
        IMPOSTOR_LOG,
        address,
    )


def stop_impostor(host):
    host.run("systemctl stop %s; systemctl reset-failed %s", IMPOSTOR_UNIT, IMPOSTOR_UNIT)


def route_address(host):
    """HOST's source address on its default route (IPv4): where node_exporter and the gateway's exporter
    listen by default."""
    return host.check_output("ip -4 -o route get 192.0.2.1").split(" src ")[1].split()[0]


def local_listeners(host, port):
    """The local ADDRESS:PORT of each TCP socket listening on PORT on HOST."""
    return [line.split()[3] for line in host.check_output(f"ss -Hltn 'sport = :{int(port)}'").splitlines()]
