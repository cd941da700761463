"""A playbook run nested in a scenario's test, as an operator runs it, read as structured results.

The run's stdout callback is ansible.posix.jsonl: one JSON event per line, as it happens (a play starts, a
task starts, a host's result, the recap's counts), so that a test asks "what did the task named X return on
spark01" or "how many changed on spark02" instead of matching the text of `TASK [` lines and the recap.
Lines that are not events (what a module or an action plugin prints while it runs, -v output) are kept as
they came, in order, for the tests that read what the operator reads. A run may also use the default
callback (text only), for the tests that assert what an operator sees at a verbosity. A test that acts at a
point of the run while it goes on (lets a held transfer go on, kills the run midway) gives play() a
`during`, which reads the run as it goes (a Live) and may kill it.

pyproject.toml puts this directory on pytest's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from waits import wait_for

PROJECT = Path(__file__).resolve().parents[2]
# A guard against a hang, not an expectation of speed: a fleet upgrade on a loaded 2-core machine has taken
# more than ten minutes.
HANG_GUARD = 3600


def flat(text: str) -> str:
    """TEXT with its line breaks and indents as single spaces: a long message may be wrapped."""
    return " ".join(text.split())


def _strings(value):
    """Every string in a result's message: a `msg` may be a string, a list of lines or a mapping."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@dataclass
class Result:
    """One host's result of one task (a handler's included), in the order the run printed it."""

    play: str
    task: str
    host: str
    event: str
    data: dict

    @property
    def name(self) -> str:
        """The task's name without its role: "Restart ds4" for "ds4.fleet.ds4_service : Restart ds4"."""
        return self.task.rsplit(" : ", 1)[-1]

    @property
    def role(self) -> str | None:
        return self.task.rsplit(" : ", 1)[0] if " : " in self.task else None

    @property
    def failed(self) -> bool:
        return self.event in ("v2_runner_on_failed", "v2_runner_on_unreachable")

    @property
    def skipped(self) -> bool:
        return self.event == "v2_runner_on_skipped"

    @property
    def changed(self) -> bool:
        return bool(self.data.get("changed"))

    @property
    def msg(self) -> str:
        """The result's message as one text ("" when it has none)."""
        return "\n".join(_strings(self.data.get("msg", "")))


@dataclass
class Run:
    """A finished nested run: its exit status, its output as printed, and its events read back."""

    rc: int
    output: str
    stderr: str = ""
    events: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    # Whether play()'s `during` killed the run before it ended by itself.
    killed: bool = False

    def __post_init__(self):
        self.results: list[Result] = []
        self.plays: list[str] = []
        self.tasks: list[str] = []
        self.stats: dict[str, dict] = {}
        play = None
        for event in self.events:
            kind = event["_event"]
            if kind == "v2_playbook_on_play_start":
                play = event["play"]["name"]
                self.plays.append(play)
            elif kind in (
                "v2_playbook_on_task_start",
                "v2_playbook_on_handler_task_start",
                "v2_runner_on_start",
            ):
                self.tasks.append(event["task"]["name"])
            elif kind == "v2_playbook_on_stats":
                self.stats = event["stats"]
            elif kind.startswith("v2_runner_on_"):
                for host, data in event["hosts"].items():
                    self.results.append(Result(play, event["task"]["name"], host, kind, data))

    def __repr__(self):
        """What a failed assertion shows (pytest prints the repr of its message): the exit status, each
        failed task with its message, the recap, and the end of what the run printed outside its events
        and of its stderr. The events themselves are JSON lines no one reads in a failure report."""
        failed = [
            f"  {result.host} failed {result.task!r}: {result.msg or result.data.get('stderr', '')}"[:3000]
            for result in self.failures()
        ]
        return "\n".join(
            [
                f"nested run: rc={self.rc}{' (killed)' if self.killed else ''}",
                *failed,
                f"  recap: {json.dumps(self.stats, sort_keys=True)}",
                *(f"  {line}" for line in self.lines[-20:]),
                *(f"  stderr: {line}" for line in self.stderr.splitlines()[-20:]),
            ]
        )

    __str__ = __repr__

    def count(self, host: str, what: str = "changed") -> int:
        """A number of the recap for HOST: changed, failures, ok, skipped, unreachable, rescued, ignored."""
        assert host in self.stats, f"{host} is not in the recap\n{self}"
        return self.stats[host][what]

    def changed(self, host: str) -> int:
        return self.count(host, "changed")

    def failed(self, host: str) -> int:
        return self.count(host, "failures")

    def unreachable(self, host: str) -> int:
        return self.count(host, "unreachable")

    def of(self, host: str | None = None, task: str | None = None) -> list[Result]:
        """The results of HOST (every host when None) of the task named TASK (its role left out, every
        task when None)."""
        return [
            result
            for result in self.results
            if (host is None or result.host == host) and (task is None or task in (result.name, result.task))
        ]

    def result(self, task: str, host: str | None = None) -> Result:
        """The one result of the task named TASK (on HOST)."""
        found = self.of(host, task)
        assert len(found) == 1, f"{len(found)} results of {task!r} on {host}\n{self}"
        return found[0]

    def failures(self, host: str | None = None) -> list[Result]:
        return [result for result in self.of(host) if result.failed]

    def plays_of(self, host: str) -> list[str]:
        """The plays in which HOST ran at least one task (a skipped one included), in order."""
        seen = []
        for result in self.results:
            if result.host == host and result.play not in seen:
                seen.append(result.play)
        return seen

    def messages(self, host: str | None = None) -> str:
        """Every result's message (HOST's alone when given; else what was printed beside the events too:
        stdout's other lines, stderr), line breaks and indents flattened to single spaces: where a test
        looks for what the run said."""
        said = [result.msg for result in self.of(host)]
        if host is None:
            said += [*self.lines, self.stderr]
        return flat("\n".join(said))

    def said(self, text: str, host: str | None = None) -> bool:
        """Whether a message of the run (of HOST's results) holds TEXT, wrapped or not."""
        return flat(text) in self.messages(host)

    def said_lines(self, host: str | None = None) -> list[str]:
        """Each line of every message (HOST's alone when given; else stdout's other lines and stderr too)."""
        said = [line for result in self.of(host) for line in result.msg.splitlines()]
        if host is None:
            said += [*self.lines, *self.stderr.splitlines()]
        return said

    def warnings(self, host: str | None = None) -> list[str]:
        """Every warning of the run, in order: those HOST's results carry (every host's when None; the
        default callback prints them as [WARNING] lines), then, when HOST is None, the [WARNING] lines
        Ansible printed on stderr outside any result."""
        said = [warning for result in self.of(host) for warning in result.data.get("warnings") or []]
        if host is None:
            mark = "[WARNING]: "
            said += [line[len(mark) :] for line in self.stderr.splitlines() if line.startswith(mark)]
        return said

    def search(self, pattern: str, host: str | None = None) -> re.Match | None:
        """The first match of PATTERN in a line that the run said (see said_lines), or None."""
        return next(filter(None, (re.search(pattern, line) for line in self.said_lines(host))), None)


class Live:
    """A nested run as it goes, handed to play()'s `during`: its events and other lines so far, whether it
    still runs, and a way to end it as an operator's Ctrl-C cannot (SIGKILL to every process of the run)."""

    def __init__(self, proc: subprocess.Popen):
        self._proc = proc
        self.events: list[dict] = []
        self.lines: list[str] = []
        self.killed = False

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def printed(self, pattern: str) -> re.Match | None:
        """The first line printed so far that is not an event and matches PATTERN whole, or None."""
        return next(filter(None, (re.fullmatch(pattern, line) for line in list(self.lines))), None)

    def started(self, task: str) -> bool:
        """Whether the task named TASK (its role left out) has started, on any host."""
        return any(
            event["_event"] in ("v2_playbook_on_task_start", "v2_runner_on_start")
            and task in (event["task"]["name"], event["task"]["name"].rsplit(" : ", 1)[-1])
            for event in list(self.events)
        )

    def wait_for(self, what: str, check, timeout: float = 900):
        """waits.wait_for while the run goes on: fails at once, with what the run printed, if it ends
        before CHECK returns something true."""

        def reached():
            value = check()
            assert value or self.running, f"the run ended before {what}:\n" + "\n".join(self.lines[-60:])
            return value

        return wait_for(what, reached, timeout=timeout, interval=0.5)

    def kill(self) -> None:
        if self.running:
            self.killed = True
            _end(self._proc)


def _descendants(pid: int) -> list[int]:
    """The processes PID started and theirs, from /proc: Ansible's workers leave its process group (each
    calls setsid), so a signal to the group would not reach them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name, in parentheses, may hold spaces: the parent's pid is the second field after.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _end(proc: subprocess.Popen) -> None:
    """SIGKILL to every process of the run: stopped first, so that it starts no other while its own are
    found."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGSTOP)
    for pid in [*_descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def play(
    playbook,
    *args,
    inventory=None,
    env=None,
    callback="ansible.posix.jsonl",
    project_config=True,
    on_line=None,
    cwd=None,
    during=None,
) -> Run:
    """Run PLAYBOOK (a path) with ARGS against the scenario's inventory (or INVENTORY: a path or a list of
    them) and wait for it.

    project_config: the repository's ansible.cfg (as an operator runs the playbooks), else Molecule's own
    (the scenario's playbooks, with Molecule's roles and collections paths). ENV: more variables.
    callback: the jsonl events (the default), or None for the default callback, read as text only.
    on_line: called with each line of stdout as it is printed, while the run goes on.
    during: called with a Live, in a thread of its own, while the run goes on: for a test that acts at a
    point of the run (lets a held transfer go on once a progress line was printed; kills the run once it
    switched releases, Run.killed). What it raises fails the test once the run has ended, and kills the run
    first so that a held run does not wait for its hang guard.
    """
    inventories = (
        inventory if isinstance(inventory, list) else [inventory or os.environ["MOLECULE_INVENTORY_FILE"]]
    )
    ansible = str(Path(sys.executable).parent / "ansible-playbook")
    cmd = [ansible]
    for path in inventories:
        cmd += ["-i", str(path)]
    cmd += [str(playbook), *args]
    # Molecule forces colour on, which would wrap every status word in escape codes.
    environ = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    environ.update(ANSIBLE_NOCOLOR="1", PYTHONUNBUFFERED="1")
    if project_config:
        environ["ANSIBLE_CONFIG"] = str(PROJECT / "ansible.cfg")
    if callback:
        environ["ANSIBLE_STDOUT_CALLBACK"] = callback
    environ.update(env or {})
    proc = subprocess.Popen(
        cmd,
        cwd=cwd or PROJECT,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    live = Live(proc)
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    guard = threading.Timer(HANG_GUARD, _end, (proc,))
    guard.start()
    raised: list[BaseException] = []
    actor = None
    if during is not None:

        def act():
            try:
                during(live)
            except BaseException as error:  # raised again in the test's thread
                raised.append(error)
                live.kill()

        actor = threading.Thread(target=act, daemon=True)
        actor.start()
    out, events, lines = [], live.events, live.lines
    try:
        for line in proc.stdout:
            out.append(line)
            text = line.rstrip("\n")
            event = None
            if callback and text.startswith("{") and text.endswith("}"):
                try:
                    event = json.loads(text)
                except ValueError:
                    event = None
            if isinstance(event, dict) and "_event" in event:
                events.append(event)
            else:
                lines.append(text)
            if on_line is not None:
                on_line(text)
        proc.wait()
        if actor is not None:
            actor.join()
    finally:
        guard.cancel()
        if proc.poll() is None:
            _end(proc)
            proc.wait()
        reader.join()
    if raised:
        raise raised[0]
    return Run(proc.returncode, "".join(out), "".join(errors), events, lines, killed=live.killed)
