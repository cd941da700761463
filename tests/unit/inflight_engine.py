"""A small HTTP server whose requests in flight a test sets and changes over time (not the engine stand-in:
only our reading of /metrics and /v1/stats, and the drain's waiting on it, are tested with it), and a clock
that moves only when the drain sleeps. The fixtures `engine` and `closed_port` are in
tests/unit/plugins/module_utils/conftest.py."""

import json

from local_http import Handler

METRICS = """# HELP ds4_requests_inflight Generation requests answered or queued.
# TYPE ds4_requests_inflight gauge
ds4_requests_inflight {n}
# HELP ds4_uptime_seconds Seconds since the server listened.
# TYPE ds4_uptime_seconds gauge
ds4_uptime_seconds 12.5
"""


class Engine(Handler):
    """Answers /metrics and /v1/stats from `inflight`, which a test sets, or lets drop to 0 once it has
    been reported `finish_after_reads` more times: requests finishing during a drain, arranged, not timed."""

    inflight = 0
    finish_after_reads = None
    # "gauge": /metrics has ds4_requests_inflight; "other": it answers without it; None: 404, as on a
    # release without /metrics.
    metrics = "gauge"
    stats = True
    seen = []
    agents = []

    @staticmethod
    def report():
        """The requests in flight, as this report of them says; counts down `finish_after_reads`."""
        inflight = Engine.inflight
        if Engine.finish_after_reads is not None:
            Engine.finish_after_reads -= 1
            if Engine.finish_after_reads == 0:
                Engine.inflight, Engine.finish_after_reads = 0, None
        return inflight

    def do_GET(self):
        Engine.seen.append((self.path, self.headers.get("Accept")))
        Engine.agents.append(self.headers.get("User-Agent"))
        if self.path == "/metrics" and Engine.metrics:
            text = METRICS.format(n=Engine.report()) if Engine.metrics == "gauge" else "other_metric 1\n"
            self.answer(200, text.encode(), "text/plain; version=0.0.4")
        elif self.path == "/v1/stats" and Engine.stats:
            if self.headers.get("Accept") == "application/json":
                body = {"server": {"requests_inflight": Engine.report(), "uptime_seconds": 12.5}}
                self.answer(200, json.dumps(body).encode(), "application/json")
            else:
                self.answer(200, f"server.requests_inflight: {Engine.report()}\n".encode(), "text/plain")
        else:
            self.answer(404, b'{"error":{"message":"unknown endpoint"}}', "application/json")


class FakeClock:
    """A clock that moves only when the drain sleeps: the waiting logic tested without waiting."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
