"""The scenario's test order: see molecule/shared/ordering.py."""

from ordering import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa: F401
