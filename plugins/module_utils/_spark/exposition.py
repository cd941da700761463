"""The Prometheus text exposition format (version 0.0.4), checked line by line: check_exposition() keeps
the well-formed lines of a text, grouped in their families, and says why each other line was dropped.

The watchdog copies the engine's own /metrics into node_exporter's textfile (metrics.engine_series), and
node_exporter drops a textfile whole for one line it cannot parse: so every line is checked here first.
Standard library only: the role installs this file beside ds4-watchdog.
"""

from __future__ import annotations

import re
from typing import Any

# A metric name, as the format defines it.
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

# --- the Prometheus text exposition format, version 0.0.4 ---------------------------------------------
# As Prometheus documents it and node_exporter's parser (Go's expfmt) reads it. Where that parser takes
# more than the documented format (hexadecimal floats, `_` between digits, a type in capitals), the
# documented form alone passes: a line dropped here costs one series, a line node_exporter refuses costs
# the whole file.
_NAME_START = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity))|(?i:nan)")
_TIMESTAMP = re.compile(r"-?[0-9]+")
_BLANKS = re.compile(r"[ \t]+")
KINDS = ("counter", "gauge", "histogram", "summary", "untyped")
# The samples a histogram or summary family `x` holds besides `x` itself.
_MEMBERS = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
_NAME_RULE = "a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*"


class _Bad(ValueError):
    """A line that breaks the format; its message says how."""


class Family:
    """A metric family as checked: its name, TYPE and HELP (None when not given) and its sample lines,
    written anew (`name{label="value",...} value`, no timestamp)."""

    def __init__(self, name: str):
        self.name = name
        self.kind: str | None = None
        self.help: str | None = None
        self.samples: list[str] = []
        self.series: set[tuple] = set()
        self.closed = False  # a line of another family followed its group


def check_exposition(text: str) -> tuple[list[Family], list[str]]:
    """The families of a Prometheus text exposition, in order, and the lines that break it.

    A line is dropped, and said as `line N: why: the line`, when it is no valid sample, HELP or TYPE
    line (names, quoted and escaped label values, a float value, an integer timestamp); when it is a
    second HELP or TYPE of its family, or one after the family's first sample; when it belongs to a
    family whose group of lines another family's line already ended; when it repeats a series (a label
    with an empty value counts as absent, as node_exporter fills one in); or when a histogram's `le` or
    a summary's `quantile` is not a float. What is kept reads as it would with the dropped lines taken
    out. Comments and blank lines are skipped.
    """
    families: dict[str, Family] = {}
    current: Family | None = None
    dropped = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip(" \t\r")
        if not line:
            continue
        try:
            if line.startswith("#"):
                current = _meta(line, families, current)
            else:
                current = _sample(line, families, current)
        except _Bad as exc:
            dropped.append(f"line {number}: {exc}: {line}")
    return list(families.values()), dropped


def _family(name: str, families: dict, current: Family | None) -> Family:
    """The family a name belongs to (a histogram's or summary's member, its own, or a new one), now the
    current one."""
    family = _find(name, families)
    if family is None:
        family = families[name] = Family(name)
    if family is not current and current is not None:
        current.closed = True
    return family


def _meta(line: str, families: dict, current: Family | None) -> Family | None:
    parts = _BLANKS.split(line[1:].lstrip(" \t"), maxsplit=2)
    if parts[0] not in ("HELP", "TYPE") or len(parts) < 2:
        return current  # a comment
    keyword, name = parts[0], parts[1]
    rest = parts[2] if len(parts) > 2 else ""
    if not _NAME.match(name):
        raise _Bad(_NAME_RULE)
    if keyword == "TYPE":
        if not rest:
            raise _Bad("a TYPE line without a type")
        if rest not in KINDS:
            raise _Bad("a type that is not counter, gauge, histogram, summary or untyped")
    else:
        _check_escapes(rest, "\\n", "an escape other than \\\\ and \\n in a HELP text")
    family = _find(name, families)
    if family is not None:
        if (family.kind if keyword == "TYPE" else family.help) is not None or family.samples:
            raise _Bad(f"a second {keyword} line for {family.name}, or one after its samples")
        if family.closed and family is not current:
            raise _Bad(f"a {keyword} line for {family.name} apart from the family's other lines")
    family = _family(name, families, current)
    if keyword == "TYPE":
        family.kind = rest
    else:
        family.help = rest
    return family


def _find(name: str, families: dict) -> Family | None:
    """The family a name belongs to: its own, or a histogram's or summary's it is a member of."""
    if name in families:
        return families[name]
    for kind, suffixes in _MEMBERS.items():
        base = next((name[: -len(end)] for end in suffixes if name.endswith(end)), None)
        if base in families and families[base].kind == kind:
            return families[base]
    return None


def _sample(line: str, families: dict, current: Family | None) -> Family:
    match = _NAME_START.match(line)
    name = match.group() if match else ""
    rest = line[len(name) :]
    if not name or (rest and rest[0] not in " \t{"):
        raise _Bad(_NAME_RULE)
    rest = rest.lstrip(" \t")
    labels: list[tuple[str, str]] = []
    if rest.startswith("{"):
        labels, rest = _labels(rest[1:])
    fields = _BLANKS.split(rest.strip(" \t")) if rest.strip(" \t") else []
    if not fields:
        raise _Bad("no value")
    if not _FLOAT.fullmatch(fields[0]):
        raise _Bad("a value that is not a float")
    if len(fields) > 1 and not _TIMESTAMP.fullmatch(fields[1]):
        raise _Bad("a timestamp that is not an integer")
    if len(fields) > 2:
        raise _Bad("more after the timestamp")
    family = _find(name, families)
    if family is not None and family is not current and family.closed:
        raise _Bad(f"a sample of {family.name} apart from the family's other lines")
    if family is not None:
        for label, kind in (("le", "histogram"), ("quantile", "summary")):
            value = dict(labels).get(label)
            if family.kind == kind and value is not None and not _FLOAT.fullmatch(value):
                raise _Bad(f"{'an' if label == 'le' else 'a'} {label} label that is not a float")
    series = (name, tuple(sorted((key, value) for key, value in labels if value)))
    if family is not None and series in family.series:
        raise _Bad(f"the series {_line(name, series[1])} a second time")
    family = _family(name, families, current)
    family.series.add(series)
    family.samples.append(f"{_line(name, labels)} {fields[0]}")
    return family


def _line(name: str, labels: Any) -> str:
    return name + ("{" + ",".join(f'{key}="{value}"' for key, value in labels) + "}" if labels else "")


def _labels(text: str) -> tuple[list[tuple[str, str]], str]:
    """The labels after a sample's `{` (each value as written, escapes kept) and what follows the `}`."""
    labels: list[tuple[str, str]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos >= end:
            raise _Bad("labels without their closing brace")
        if text[pos] == "}":
            return labels, text[pos + 1 :]
        match = _LABEL.match(text, pos)
        if not match:
            raise _Bad("a label name that is not [a-zA-Z_][a-zA-Z0-9_]*")
        name, pos = match.group(), match.end()
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos >= end or text[pos] != "=":
            raise _Bad("a label without = and a value")
        pos += 1
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos >= end or text[pos] != '"':
            raise _Bad("a label value not in double quotes")
        start = pos = pos + 1
        while pos < end and text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        if pos >= end:
            raise _Bad("a label value without its closing quote")
        value = text[start:pos]
        _check_escapes(value, '\\"n', 'an escape other than \\\\, \\" and \\n in a label value')
        if name.startswith("__"):
            raise _Bad("a label name beginning with __, which is reserved")
        if any(name == seen for seen, _value in labels):
            raise _Bad(f"the label {name} twice")
        labels.append((name, value))
        pos += 1
        while pos < end and text[pos] in " \t":
            pos += 1
        if pos < end and text[pos] == ",":
            pos += 1
        elif pos < end and text[pos] != "}":
            raise _Bad("labels not separated by commas")


def _check_escapes(text: str, allowed: str, message: str) -> None:
    pos = text.find("\\")
    while pos >= 0:
        if pos + 1 >= len(text) or text[pos + 1] not in allowed:
            raise _Bad(message)
        pos = text.find("\\", pos + 2)
