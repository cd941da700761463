"""The scenario's test order (molecule/shared/ordering.py), and its hosts for every test file."""

import pytest
from ordering import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401
from spark import sandbox_host


@pytest.fixture(scope="session")
def hosts():
    """The gateway and the two Sparks behind it, by name."""
    return {name: sandbox_host(name) for name in ("gw01", "spark01", "spark02")}
