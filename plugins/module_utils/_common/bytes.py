"""Byte counts in words: the one place that says how the collection writes a size.

- `describe_bytes(n)` for a message an operator acts on: exact and in GiB: `67,108,864 bytes (0.06 GiB)`.
- `gib(n)` for a summary line: `12.3 GiB`.
- `human_bytes(n)` for a progress line or a table cell: `512 B`, `385.1 KiB`, `80.8 GiB`.

Standard library only.
"""

from __future__ import annotations

GIB = 1 << 30


def gib(count):
    """12 * 2**30 + 2**29 -> '12.5 GiB'."""
    return f"{count / GIB:.1f} GiB"


def describe_bytes(count):
    """67108864 -> '67,108,864 bytes (0.06 GiB)': exact, and readable at a glance."""
    return f"{count:,} bytes ({count / GIB:.2f} GiB)"


def human_bytes(count):
    """512 -> '512 B', 394368 -> '385.1 KiB', up to TiB."""
    value, unit = count, "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
