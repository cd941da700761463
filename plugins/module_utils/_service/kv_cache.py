"""The engine's on-disk KV cache (--kv-disk-dir) across a swap of model family (issue 53).

The engine keeps its KV banks on disk across a model swap (`cross-quant=accept`): banks of one family
served to another are wrong answers. So the family the cache was written by is recorded beside it (a
record of root's, outside the engine's directory), and a launch of another family clears the cache while
the engine is stopped, in the same restart; a rollback clears what the failed family wrote and records
the family restored.

    {"family": the family the cache is of, "before": the family it was of before the last switch}
"""

from __future__ import annotations

import json
import os

from ansible_collections.ds4.fleet.plugins.module_utils._spark import no_follow

# A cache written before the catalog had families is the one family there was.
FAMILY_BEFORE_FAMILIES = "deepseek-v4-flash"


class KvCacheError(ValueError):
    """The record is not usable; the message names it."""


def _read(record):
    try:
        data = no_follow.read_object(record)
    except OSError as exc:
        raise KvCacheError(f"{record} cannot be read: {exc}") from exc
    except ValueError:
        data = {}
    if data is not None and not isinstance(data.get("family"), str):
        raise KvCacheError(f"{record} is not a record of the KV cache's family; remove it, then run again")
    return data


def _write(record, family, before):
    directory = os.path.dirname(record)
    if not no_follow.private_dir(directory):
        raise KvCacheError(f"{directory} must be a directory of root's alone, to keep the KV cache's record")
    content = json.dumps({"family": family, "before": before}, sort_keys=True).encode()
    no_follow.replace_file(record, content, 0o600)


def _clear(kv_dir, check_mode):
    """The entries of kv_dir removed (never through a link); the directory itself stays, the engine's."""
    if not os.path.isdir(kv_dir):
        return []
    return no_follow.remove(kv_dir, select=lambda _name, _st: True, check_mode=check_mode)


def switched(kv_dir, record, family, check_mode=False):
    """Before the engine starts `family` (stopped): clear the cache when it is of another family, and record
    `family`. {changed, swap, from, removed}."""
    data = _read(record)
    before = data["family"] if data else FAMILY_BEFORE_FAMILIES
    swap = before != family
    removed = _clear(kv_dir, check_mode) if swap else []
    changed = data != {"family": family, "before": before}
    if changed and not check_mode:
        _write(record, family, before)
    return {"changed": changed, "swap": swap, "from": before, "removed": removed}


def restored(kv_dir, record, check_mode=False):
    """After a rollback put back the engine of the family before the last switch (stopped): clear what the
    failed family wrote, and record the family restored. {changed, swap, from, removed}."""
    data = _read(record)
    if not data or data.get("before", data["family"]) == data["family"]:
        return {"changed": False, "swap": False, "from": data["family"] if data else None, "removed": []}
    removed = _clear(kv_dir, check_mode)
    if not check_mode:
        _write(record, data["before"], data["before"])
    return {"changed": True, "swap": True, "from": data["family"], "removed": removed}
