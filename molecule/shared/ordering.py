"""The order of a scenario's tests, for its conftest.py: `--reverse` runs them last to first (each test
must pass whatever ran before it, the issue-27 rule), and a test marked `ends_scenario` runs after every
other whatever the order, because it leaves its hosts changed for good (an operator's upgrade path that
ends on a newer release: putting the hosts back would cost more than the story itself).

A scenario's tests/conftest.py imports the three hooks below."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--reverse", action="store_true", help="run the scenario's tests last to first")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ends_scenario: leaves the hosts changed for good; runs after every other test"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    ends = [item for item in items if item.get_closest_marker("ends_scenario") is not None]
    others = [item for item in items if item.get_closest_marker("ends_scenario") is None]
    if config.getoption("--reverse"):
        others.reverse()
    # The ends keep their written order whatever the others': each leaves the hosts changed for good, so
    # the later one runs on what the earlier left (the gateway's upgrade, then its removal).
    items[:] = others + ends
