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
    if config.getoption("--reverse"):
        items.reverse()
    # A stable sort: the others keep their order, and so do the ends among themselves.
    items.sort(key=lambda item: item.get_closest_marker("ends_scenario") is not None)
