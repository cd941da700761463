"""One commit-id grammar (module_utils/_common/commit.py), as its three readers used it before: the
settings' ds4_release_commit (either case, nothing around it), the release plan's pin (blanks around it
stripped, either case, recorded in lower case) and the hub's pinned revision (lower case only)."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.commit import commit_id, is_pinned_revision
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import ReleaseError, check_commit
from ansible_collections.ds4.fleet.plugins.module_utils._run.settings import RULES

LOWER = "0123456789abcdef" * 2 + "01234567"


def test_a_commit_id_is_40_hex_digits_in_either_case_given_in_lower_case():
    assert commit_id(LOWER) == LOWER
    assert commit_id(LOWER.upper()) == LOWER
    for wrong in ("", LOWER[:39], LOWER + "0", "g" * 40, f" {LOWER}", f"{LOWER}\n", None, 40):
        assert commit_id(wrong) is None, wrong


def test_the_settings_take_either_case_or_nothing_and_no_blanks():
    rule = RULES["ds4_release_commit"]
    assert [rule(value) for value in ("", LOWER, LOWER.upper())] == [None, None, None]
    for wrong in (f"{LOWER}\n", f" {LOWER}", "abc", "g" * 40, None):
        assert rule(wrong) == "empty or a full commit id, 40 hex digits", wrong


def test_the_release_plan_strips_blanks_and_records_lower_case():
    assert check_commit(f" {LOWER.upper()}\n") == LOWER
    assert check_commit("") is None and check_commit(None) is None
    for wrong in ("abc", "g" * 40, LOWER + "0", 7):
        with pytest.raises(ReleaseError, match="40 hex digits"):
            check_commit(wrong)


def test_a_hub_revision_is_pinned_only_as_the_hub_writes_a_commit():
    assert is_pinned_revision(LOWER)
    # Upper case, a trailing newline, a branch or tag name: a revision that could move.
    for moving in (LOWER.upper(), f"{LOWER}\n", "main", "v1.0", None):
        assert not is_pinned_revision(moving), moving
