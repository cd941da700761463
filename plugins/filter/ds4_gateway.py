"""Filters of the gateway; the logic lives in module_utils/_net/haproxy.py and module_utils/_run/settings.py.

- `ds4_gateway_api_keys | ds4.fleet.gateway_keys(file_text)` -> the keys of the list, then those of the
  keys file's text (one a line, "#" starts a comment), each once.

- `gateways | ds4.fleet.gateway_records(hostvars)` -> gateway -> {servers, error}, from each gateway's
  registered `__ds4_fleet_gateway` (ds4_gateway_server's read).
- `records | ds4.fleet.gateway_table` -> the Sparks' states at each gateway as lines of plain text.
- `sparks | ds4.fleet.vision_sparks(hostvars, ds4_model_catalog, ds4_model_family)` -> the Sparks that serve
  a vision model (module_utils/_fleet/vision.py), which alone take a body as large as images need.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.vision import vision_sparks
from ansible_collections.ds4.fleet.plugins.module_utils._net.haproxy import (
    gateway_record,
    render_gateway_table,
)
from ansible_collections.ds4.fleet.plugins.module_utils._run.settings import gateway_keys
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import CatalogError


def gateway_records(gateways, hostvars) -> dict:
    return {name: gateway_record(hostvars[name].get("__ds4_fleet_gateway")) for name in gateways}


def gateway_table(records) -> list[str]:
    return render_gateway_table(records)


def vision_sparks_filter(sparks, hostvars, catalog, family) -> list:
    try:
        return vision_sparks(list(sparks), hostvars, catalog, family)
    except CatalogError as e:
        raise AnsibleFilterError(f"vision_sparks: {e}") from e


class FilterModule:
    def filters(self):
        return {
            "gateway_keys": gateway_keys,
            "gateway_records": gateway_records,
            "gateway_table": gateway_table,
            "vision_sparks": vision_sparks_filter,
        }
