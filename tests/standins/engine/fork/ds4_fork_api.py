"""STAND-IN: the fork's own HTTP endpoints (test infrastructure of ds4-fleet, NOT the real engine).

The fork (Entrpi/ds4) serves its requests in flight and counters at these paths; upstream (antirez/ds4)
serves neither (engine contract, "The engine owners run in late 2026"). make_repo.py commits this file
into the fork's releases alone, so that upstream's stand-in source names neither path, as upstream's does,
and its ds4-server answers both with 404 `unknown endpoint`.
"""

STATS_PATH = "/v1/stats"
METRICS_PATH = "/metrics"
