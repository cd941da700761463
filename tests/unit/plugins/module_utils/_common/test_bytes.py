"""Byte counts in words (module_utils/_common/bytes.py): one way to write a size, wherever it is shown."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import (
    GIB,
    describe_bytes,
    gib,
    human_bytes,
)


def test_a_message_gives_the_exact_count_and_gib():
    assert describe_bytes(93691352992) == "93,691,352,992 bytes (87.26 GiB)"
    # A shortfall of a few bytes is not rounded away to nothing.
    assert describe_bytes(67108864) == "67,108,864 bytes (0.06 GiB)"


def test_a_summary_gives_gib():
    assert gib(12 * GIB + GIB // 2) == "12.5 GiB"


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0 B"),
        (512, "512 B"),
        (394368, "385.1 KiB"),
        (985432112, "939.8 MiB"),
        (77 * GIB + GIB // 2, "77.5 GiB"),
        (86720111488, "80.8 GiB"),
        (3 * 1024**4, "3.0 TiB"),
        (2048 * 1024**4, "2048.0 TiB"),
    ],
)
def test_a_progress_line_or_table_cell_reads_as_a_person_would_say_it(count, text):
    assert human_bytes(count) == text
