"""A weight fetch's progress, written to a JSON file that a poller reads (action plugin ds4_hub_wait)."""

from __future__ import annotations

import errno
import json
import os
import threading
import time

from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import replace_text


def write_progress(path, **fields):
    """Replace the progress file in one rename, so a reader never sees half of it.

    Format (JSON object; docs/weights.md): file, state ("hashing", "fetching", "retrying", "done",
    "failed"), bytes_done, total, resumed_from (bytes on disk when this run started fetching), rate_bps
    (this run's average), eta_s (null until a rate is known), elapsed_s, attempt (try of the current
    request), connections (open for the transfer), error (when retrying or failed), updated (epoch
    seconds), pid.
    """
    if not path:
        return
    fields.update(updated=round(time.time(), 3), pid=os.getpid())
    replace_text(path, json.dumps(fields, sort_keys=True), sync=False)


class Progress:
    """Throttled progress for one file: writes at most every `interval` seconds, plus state changes.

    Safe to call from several threads: one write at a time, the latest state wins.
    """

    def __init__(self, path, name, total, interval, start_done):
        self.path, self.name, self.total, self.interval = path, name, total, interval
        self.start_done = start_done
        self.started = time.monotonic()
        self.next_at = 0.0
        self.attempt = 1
        self.connections = None
        self._lock = threading.Lock()

    def due(self, now):
        return self.path is not None and now >= self.next_at

    def report(self, state, done, now=None, error=None):
        now = time.monotonic() if now is None else now
        self.next_at = now + self.interval
        elapsed = now - self.started
        moved = done - self.start_done
        rate = moved / elapsed if elapsed > 0 and moved > 0 else 0.0
        fields = {
            "file": self.name,
            "state": state,
            "bytes_done": done,
            "total": self.total,
            "resumed_from": self.start_done,
            "rate_bps": round(rate),
            "eta_s": round((self.total - done) / rate, 1) if rate else None,
            "elapsed_s": round(elapsed, 1),
            "attempt": self.attempt,
        }
        if self.connections is not None:
            fields["connections"] = self.connections
        if error is not None:
            fields["error"] = error
        with self._lock:
            try:
                write_progress(self.path, **fields)
            except OSError as e:
                # A full disk is the transfer's to report, in words; the operator's view waits for room.
                if e.errno != errno.ENOSPC:
                    raise
