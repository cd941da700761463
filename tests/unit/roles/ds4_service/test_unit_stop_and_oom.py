"""What ds4.service says about the engine's stop and its OOM priority, read from the unit template, held
to the engine contract's facts (the shared docs' "Stop" and "The engine owners run in late 2026")."""

import re
from pathlib import Path

UNIT = Path(__file__).resolve().parents[4] / "roles" / "ds4_service" / "templates" / "ds4.service.j2"


def settings():
    """Each `Key=value` line of the unit's [Service] section, outside Jinja blocks, by key (last wins)."""
    text = UNIT.read_text()
    service = text.split("[Service]", 1)[1].split("[Install]", 1)[0]
    found = {}
    for line in service.splitlines():
        match = re.fullmatch(r"([A-Za-z]+)=(.*)", line.strip())
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def test_the_unit_states_the_oom_priority_the_engine_takes_itself():
    # The CUDA backend writes oom_score_adj=1000 at start-up; a lower value in the unit would only be
    # undone, and a value the engine may not raise does not exist. The unit says 1000, once.
    assert settings()["OOMScoreAdjust"] == ["1000"]


def test_the_stop_is_one_draining_signal_and_no_second_before_the_timeout():
    found = settings()
    # The engine drains on its first SIGTERM or SIGINT and exits at once on a second: one signal, to the
    # engine alone, and TimeoutStopSec (ds4_stop_timeout, in the supervision drop-in) before any other.
    assert found["KillSignal"] == ["SIGTERM"] and found["KillMode"] == ["mixed"]
    assert "SendSIGHUP" not in found and "FinalKillSignal" not in found
    assert "TimeoutStopSec" not in found, "the stop timeout belongs to the supervision drop-in"
