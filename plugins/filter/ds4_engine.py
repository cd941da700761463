"""Filters over the engine's address.

engine_url(host, port)
    The base URL that reaches an engine listening on ds4_host:ds4_port from the Spark itself (a wildcard
    address on loopback, an IPv6 address in brackets): module_utils/_spark/drain.py's engine_url, the one
    the modules that call the engine use.
engine_lineage(declared, release)
    The engine's lineage a Spark runs, fork or upstream: ds4_engine_lineage, or "" to follow ds4_release
    (a tag is the fork's, a release pinned by commit upstream's): module_utils/_engine/lineage.py's effective.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._engine.lineage import LineageError, effective
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import engine_url


def engine_url_filter(host, port):
    try:
        return engine_url(host, port)
    except (TypeError, ValueError) as e:
        raise AnsibleFilterError(f"engine_url: {e}") from e


def engine_lineage_filter(declared, release):
    try:
        return effective(declared, release)
    except LineageError as e:
        raise AnsibleFilterError(f"engine_lineage: {e}") from e


class FilterModule:
    def filters(self):
        return {"engine_url": engine_url_filter, "engine_lineage": engine_lineage_filter}
