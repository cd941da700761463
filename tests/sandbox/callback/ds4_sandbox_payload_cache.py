"""Tests only: the module payloads one ansible-playbook run builds, kept for the next runs of the suite.

Before its first task runs a module, each ansible-playbook process builds that module's AnsiballZ payload:
ansible-core walks the module's imports and parses every module_utils file they reach (about a quarter
of the controller's CPU in a full site.yml run on the 2-core test machines), and keeps the payload in the
run's own temporary directory, which it removes at its end. The suite runs a few hundred playbooks that
use the same modules. Enabled by molecule/shared/nested.py and Molecule's settings, this callback points
the run's payload cache (C.DEFAULT_LOCAL_TMP/ansiballz_cache) at a directory that outlives it, one per
fingerprint of everything a payload is built from: ansible-core's version and place, and the name, size
and modification time of every file of the collection's modules and module_utils. A changed file makes a
new fingerprint and a fresh cache. The payloads are the same bytes ansible-core builds; only the building
is saved. Runs of operators never load this.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: ds4_sandbox_payload_cache
type: aggregate
short_description: Keep module payloads between the test suite's playbook runs
description:
  - Points the run's AnsiballZ cache at a directory of DS4_SANDBOX_PAYLOAD_CACHE named by a fingerprint of
    ansible-core and the collection's modules and module_utils. Tests only.
requirements:
  - DS4_SANDBOX_PAYLOAD_CACHE in the environment, a directory
"""

# plugins/ of this repository, which is the collection ds4.fleet.
PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


def fingerprint(plugins: Path = PLUGINS) -> str:
    """A digest of what a payload is built from: ansible-core (version, place) and each file of the
    collection's modules and module_utils (name, size, modification time)."""
    digest = hashlib.sha256(f"{ansible.__version__}\0{ansible.__file__}\0{sys.version}".encode())
    for folder in ("modules", "module_utils"):
        for path in sorted((plugins / folder).rglob("*.py")):
            st = path.stat()
            digest.update(f"\0{path.relative_to(plugins)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def link_cache(local_tmp: str, store: str, plugins: Path = PLUGINS) -> Path | None:
    """LOCAL_TMP/ansiballz_cache made a link to STORE/<fingerprint> (made if missing); None when the run
    has built a payload already (its cache is a directory) or STORE cannot be used: the run then builds
    its own, as without this plugin."""
    target = Path(store) / fingerprint(plugins)
    link = Path(local_tmp) / "ansiballz_cache"
    try:
        target.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    except OSError:
        return None
    return target


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ds4_sandbox_payload_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Loaded in the run's main process before any worker is forked: every worker sees the link.
        store = os.environ.get("DS4_SANDBOX_PAYLOAD_CACHE")
        if store:
            link_cache(C.DEFAULT_LOCAL_TMP, store)
