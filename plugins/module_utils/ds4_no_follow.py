"""Reading the files a run keeps on a Spark for itself (its lock, its record), never through a link."""

from __future__ import annotations

import os


def read_text(path):
    """The file's text, or None when there is no file. A link (ELOOP) or anything else unreadable raises
    OSError, for the caller to say what the file was."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        return handle.read()
