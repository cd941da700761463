"""What a commit id is: the one grammar of the engine's pinned commit (ds4_release_commit, checked by the
settings and by the release plan) and of a weight hub's revision pinned to a commit.

A full SHA-1 id, 40 hex digits. git and the hub write it in lower case; a person may paste it in upper case,
which names the same commit, so `commit_id` folds the case and gives the one spelling to compare and record.
"""

from __future__ import annotations

import re

# As git and the hub write it: the only spelling compared or recorded.
COMMIT_ID = re.compile(r"[0-9a-f]{40}")


def commit_id(text: object) -> str | None:
    """The commit id `text` spells, in lower case; None when it is not 40 hex digits in either case,
    whitespace included (a caller that allows blanks around it strips them first)."""
    if not isinstance(text, str):
        return None
    folded = text.lower()
    return folded if COMMIT_ID.fullmatch(folded) else None


def is_pinned_revision(revision: object) -> bool:
    """Whether a hub revision is a commit as the hub writes it (lower case), the one kind of revision that
    cannot move under a file; a branch or tag name can."""
    return isinstance(revision, str) and COMMIT_ID.fullmatch(revision) is not None
