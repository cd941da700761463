"""Watchdog: decide, from the unit's state and one probe of the engine, whether it hangs and must restart.

`Restart=on-failure` brings back an engine that dies; one that hangs (a wedged GPU call, a deadlock, a
SIGSTOP) keeps its process and answers nothing. A timer runs the host-side `ds4-watchdog` every few seconds;
each run asks the engine how many requests it holds (`ds4_drain.read_inflight`: `/metrics`, else
`/v1/stats`) and hands what it saw to `decide`, which says what to do:

- the unit is not `active` (stopped, failed, loading, restarting): leave it alone. A loading engine does
  not answer yet, systemd's own restart and start limit handle a crash, and an engine an operator stopped
  stays stopped. A unit failed at its start limit is reported once: restarts stopped there. systemd puts
  `Result=start-limit-hit` only when the start it refused followed a clean stop; a restart refused after a
  crash or a kill (the watchdog's own) keeps that run's Result, and only systemd's journal line
  (START_LIMIT_LINE) says why no restart followed, which the caller reads (`needs_journal`).
- the engine answered, with requests in flight or not: it is alive (busy and answering is not hung).
- it did not answer: one more failure. After `failures` in a row for the same engine process, the verdict
  is `hung` and the action `kill`: the caller kills the unit's processes with SIGKILL, and systemd's
  `Restart=on-failure` starts it again after `RestartSec=`, counted against the start limit like any crash,
  so an engine that hangs every time stops with the start limit rather than reloading its model for ever.
  SIGKILL rather than `systemctl restart`: the engine's graceful stop waits for its requests, and a hung
  engine would hold that stop for `TimeoutStopSec=` (600 s).

A request the engine holds while its HTTP server still answers is never a failure. A process that answers
nothing at all (stopped, or its server wedged) gives no sign of progress, whatever it held before.

Each run also checks the engine firewall (role ds4_firewall) while its unit is active: the engine then
listens beyond loopback and only the firewall's nftables table keeps other hosts out. `nft flush ruleset`
by hand, or another tool that replaces the whole ruleset, removes that table without its unit knowing. A
table found missing is loaded again through the unit (`systemctl reload`); one that cannot be is a firewall
that no longer stands: its unit is stopped, and the engine, bound to it, with it (`firewall_outcome`).

A pair's members (issue 42, the engine's distributed mode) are watched as their roles allow. The coordinator
serves the API; while its worker is not registered (starting, restarting, gone) the coordinator answers
every request with the contract's error `coordinator route does not start at layer 0`. Such a coordinator
answers: it is alive and only waits, so it is `waiting`, never counted towards a kill (a restart would not
bring the worker back, and would reload its own slice for nothing). The caller reads the route with one
small request once the probe was answered and nothing is in flight (`route_state` of its answer) and hands
it in the probe as `route`. The worker serves no API (`api=False`): its unit's state is all there is to
watch; systemd restarts it when it dies, and the coordinator's route says whether it serves.

Standard library only: it runs on the Spark, installed beside the `ds4-watchdog` script.
"""

from __future__ import annotations

import json
from typing import Any

# What `systemctl show --timestamp=unix` is asked for; decide() reads these, and the caller the last exit
# of the engine, from which on the journal may say the unit's restart was refused.
UNIT_PROPERTIES = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "ExecMainExitTimestamp")
# What systemd logs about a unit when it refuses to start it at its start limit.
START_LIMIT_LINE = "Start request repeated too quickly"
# The engine firewall's table is of this family (templates/ds4-engine.nft.j2 of role ds4_firewall), and it
# refuses the engine's port to the others with this rule.
FIREWALL_FAMILY = "inet"
FIREWALL_REFUSAL = "reject with tcp reset"
# What a pair's coordinator answers to a request while its route has no worker (the engine contract).
ROUTE_INCOMPLETE = "coordinator route does not start at layer 0"


def route_state(status: int, body: str) -> str:
    """A coordinator's route from its answer to one request: `complete` (answered), `incomplete` (the
    contract's error, whatever the HTTP status), `unknown` (any other error: a full queue, a bad gateway)."""
    if status == 200:
        return "complete"
    try:
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        return "unknown"
    return "incomplete" if message == ROUTE_INCOMPLETE else "unknown"


def parse_show(text: str) -> dict:
    """`systemctl show --property=...` output as a dict of strings."""
    unit = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            unit[key.strip()] = value.strip()
    return unit


def needs_journal(unit: dict) -> bool:
    """Whether only systemd's journal can say if this unit is at its start limit: it failed, and its Result
    is that of its last run rather than `start-limit-hit`."""
    return unit.get("ActiveState") == "failed" and unit.get("Result") != "start-limit-hit"


def start_limit_in(journal: str) -> bool:
    """Whether systemd's lines about the unit (since its engine last exited) say it refused a start."""
    return START_LIMIT_LINE in journal


def new_state() -> dict:
    """The watchdog's memory between runs, as kept in its state file."""
    return {
        "runs": 0,
        "failures": 0,
        "first_failure_at": None,
        "main_pid": None,
        "verdict": None,
        "restarts": 0,
        "last_restart_at": None,
        "last_restart_reason": None,
        "firewall_restores": 0,
        # Lines of the engine's /metrics the textfile left out (metrics.engine_series), all runs.
        "metrics_dropped": 0,
    }


def load_state(data: Any) -> dict:
    """A state read from disk, with anything missing or of the wrong type put back to its initial value."""
    state = new_state()
    if isinstance(data, dict):
        for key, initial in state.items():
            value = data.get(key)
            if key in ("runs", "failures", "restarts", "firewall_restores", "metrics_dropped"):
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    state[key] = value
            elif key in ("first_failure_at", "last_restart_at"):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    state[key] = value
            elif key == "main_pid":
                if isinstance(value, int) and not isinstance(value, bool):
                    state[key] = value
            elif isinstance(value, str):
                state[key] = value
            else:
                state[key] = initial
    return state


def _pid(unit: dict) -> int:
    try:
        return int(unit.get("MainPID", "0"))
    except ValueError:
        return 0


def decide(
    unit: dict,
    probe: dict,
    state: dict,
    failures: int,
    now: float,
    restart: bool = True,
    start_limit_hit: bool = False,
    unit_name: str = "ds4.service",
    api: bool = True,
) -> dict:
    """What to do now.

    `unit`: `systemctl show` properties (UNIT_PROPERTIES). `probe`: {"answered": bool, "inflight": int or
    None, "error": str or None}, or None when the engine was not probed. `state`: the previous run's state
    (load_state). `failures`: failed probes in a row that make an engine hung. `now`: seconds (time.time()).
    `restart`: false when the watchdog only watches (turned off): a hung engine is reported, not killed.
    `start_limit_hit`: systemd's journal says it refused the failed unit's restart (start_limit_in).
    `unit_name`: the unit, as messages name it. `api`: false for a pair's worker, which serves no API and
    is not probed (`probe` None): an active worker unit is `running`. A probe's `route` (a coordinator's:
    route_state) `incomplete` makes an answering engine `waiting` for its worker, never a failure.

    Returns {"verdict", "action" ("none" or "kill"), "message", "log" (say the message in the journal),
    "warning" (at warning priority), "state" (to keep for the next run)}.
    """
    state = dict(state)
    state["runs"] = state.get("runs", 0) + 1
    run = _Run(state, _pid(unit), unit_name)
    active = unit.get("ActiveState", "")
    if active != "active":
        run.reset()
        return _not_active(run, active, unit, start_limit_hit)
    if not api:
        run.reset()
        return run.result(
            "running",
            f"{unit_name} (pid {run.pid}) runs; it serves no API to probe: its coordinator's route says "
            "whether it serves",
        )
    if probe is None:
        raise ValueError("an active unit must be probed")
    if state.get("main_pid") != run.pid:
        # Another engine process than the one that failed before: its failures start from zero.
        run.reset()
    if probe.get("answered"):
        run.reset()
        if probe.get("route") == "incomplete":
            return run.result(
                "waiting",
                f"{unit_name} (pid {run.pid}) answers, but its route is incomplete ({ROUTE_INCOMPLETE}): the "
                "pair's coordinator waits for its worker; not hung, not restarted. systemctl status "
                "ds4-worker on the worker says why it is not there",
                warning=True,
            )
        return _answered(run, probe.get("inflight"))
    return _failed(run, probe.get("error") or "no answer", failures, now, restart)


class _Run:
    """One run's view: the state it updates for the next run, and how it words a result."""

    def __init__(self, state: dict, pid: int, name: str = "ds4.service"):
        self.state = state
        self.pid = pid
        self.name = name
        self.previous = state.get("verdict")

    def result(self, verdict, message, action="none", log=None, warning=False):
        self.state["verdict"] = verdict
        return {
            "verdict": verdict,
            "action": action,
            "message": message,
            # Steady states are said once, when they begin; failures and kills every time.
            "log": (verdict != self.previous) if log is None else log,
            "warning": warning,
            "state": self.state,
        }

    def reset(self):
        self.state["failures"] = 0
        self.state["first_failure_at"] = None
        self.state["main_pid"] = self.pid or None


def _not_active(run: _Run, active: str, unit: dict, start_limit_hit: bool) -> dict:
    sub = unit.get("SubState", "")
    short = run.name.removesuffix(".service")
    if active == "failed" and (unit.get("Result") == "start-limit-hit" or start_limit_hit):
        return run.result(
            "start-limit-hit",
            f"{run.name} hit its start limit and systemd stopped restarting it; the watchdog leaves it "
            f"alone too. Fix the cause, then: systemctl reset-failed {short} && systemctl start {short}",
            warning=True,
        )
    if active in ("activating", "deactivating", "reloading"):
        return run.result(
            "starting",
            f"{run.name} is {active} ({sub}): loading or restarting, not probed until it is active",
        )
    return run.result("not-running", f"{run.name} is {active or 'unknown'} ({sub}); nothing to watch")


def _answered(run: _Run, inflight: Any) -> dict:
    if inflight:
        return run.result(
            "busy",
            f"{run.name} (pid {run.pid}) answers with {inflight} request{'' if inflight == 1 else 's'} in "
            "flight: busy, not hung",
        )
    return run.result("ok", f"{run.name} (pid {run.pid}) answers")


def _failed(run: _Run, error: str, failures: int, now: float, restart: bool) -> dict:
    """A probe the engine did not answer: counted, and after `failures` in a row the engine is hung."""
    state, pid = run.state, run.pid
    count = state.get("failures", 0) + 1
    state["failures"] = count
    state["main_pid"] = pid
    if state.get("first_failure_at") is None:
        state["first_failure_at"] = now
    if count < failures:
        return run.result(
            "failing",
            f"{run.name} (pid {pid}) did not answer ({count} of {failures} before a restart): {error}",
            log=True,
            warning=True,
        )
    span = now - state["first_failure_at"]
    why = (
        f"{run.name} (pid {pid}) is hung: it did not answer {count} probes in a row over {span:.0f} s "
        f"(last: {error})"
    )
    if not restart:
        return run.result(
            "hung", f"{why}; the watchdog is turned off, so it is not restarted", log=True, warning=True
        )
    state["restarts"] = state.get("restarts", 0) + 1
    state["last_restart_at"] = now
    state["last_restart_reason"] = why
    state["failures"] = 0
    state["first_failure_at"] = None
    return run.result(
        "hung",
        f"{why}; killing it (SIGKILL) so that systemd restarts it (Restart=on-failure, within its start "
        f"limit); watchdog restart {state['restarts']}",
        action="kill",
        log=True,
        warning=True,
    )


def detection_bound(interval: float, failures: int, timeout: float) -> float:
    """The most seconds between an engine hanging and the watchdog's kill, timer slack aside.

    The hang can begin just after a probe that passed; the next run is at most `interval` later and fails,
    `failures - 1` more runs follow, one each `interval`, and the last one waits `timeout` for its answer.
    """
    return interval * failures + timeout


def firewall_loaded(returncode: int, listing: str) -> bool:
    """Whether `nft list table inet <table>` (its exit status and output) shows the firewall standing: the
    table is there and refuses the engine's port to the others. A table emptied by `nft flush table` is
    there but refuses nothing."""
    return returncode == 0 and FIREWALL_REFUSAL in listing


def firewall_outcome(
    table: str, firewall_unit: str, engine_unit: str, loaded: bool, reload_error: str | None = None
) -> dict:
    """What to do once the firewall's table was found missing and its unit asked to load it again.

    `loaded`: whether the table stands after that reload; `reload_error`: what the reload said when it
    failed. Returns {"action": "none" or "stop" (stop `firewall_unit`: `engine_unit`, bound to it whenever
    it listens beyond loopback, stops with it), "message"}, the message said at warning priority either way.
    """
    missing = (
        f"the engine firewall's table {FIREWALL_FAMILY} {table} was missing while {firewall_unit} is active "
        "(nft flush ruleset, or another tool that replaced the whole ruleset?)"
    )
    if loaded:
        return {"action": "none", "message": f"{missing}: loaded it again ({firewall_unit} reloaded)"}
    why = f" ({reload_error})" if reload_error else ""
    return {
        "action": "stop",
        "message": (
            f"{missing}, and reloading {firewall_unit} did not load it{why}: stopping {firewall_unit}, and "
            f"with it {engine_unit}, rather than leave the engine open to every host. Fix the rules, then: "
            f"systemctl start {engine_unit} (its firewall starts first)"
        ),
    }
