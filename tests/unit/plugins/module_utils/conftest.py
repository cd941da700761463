"""Fixtures of the tests of module_utils that talk to an engine: _spark/test_engine_http.py (reading it)
and _service/test_drain.py (waiting on it)."""

import socket

import pytest
from inflight_engine import Engine
from local_http import local_http


@pytest.fixture
def engine():
    Engine.inflight, Engine.finish_after_reads = 0, None
    Engine.metrics, Engine.stats, Engine.seen, Engine.agents = "gauge", True, [], []
    with local_http(Engine) as url:
        yield url


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on: an engine that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
