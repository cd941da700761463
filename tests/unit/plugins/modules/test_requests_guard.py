"""Without requests on the target, the modules that reach the hub say what is missing, with no traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from module_utils_graph import imports, path_of

REPO = Path(__file__).resolve().parents[4]
# sys.modules[name] = None makes `import name` raise ImportError, as on a host without the package.
PROGRAM = """
import sys
sys.modules["requests"] = None
sys.path.insert(0, {collections!r})
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.modules import {module}
with patch_module_args({args!r}):
    {module}.main()
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("ds4_hub_file", {"repo": "r", "file": "f", "dest": "/tmp"}),
        ("ds4_weights_plan", {"catalog": {}, "generation": "0731", "speculation": "none"}),
    ],
)
def test_a_missing_requests_is_named(module, args):
    program = PROGRAM.format(collections=str(REPO / "collections"), module=module, args=args)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    out = json.loads(result.stdout)
    assert out["failed"] is True
    assert out["msg"].startswith("Failed to import the required Python library (requests (python3-requests))")
    assert "Traceback" not in out["msg"]


# The modules that talk to the hub; every other module reads or changes its host with the standard library.
HUB_MODULES = {"ds4_hub_file", "ds4_weights_plan"}


def _reaches_requests(path: Path) -> list:
    """The module_utils that `path` imports, directly or through others, that import requests."""
    seen, todo = set(), list(imports(path)[0])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imports(path_of(name))[0])
    return sorted(name for name in seen if "requests" in imports(path_of(name))[1])


@pytest.mark.parametrize("path", sorted((REPO / "plugins" / "modules").glob("*.py")), ids=lambda p: p.stem)
def test_only_the_hub_modules_import_requests(path):
    reached = _reaches_requests(path)
    if path.stem in HUB_MODULES:
        assert reached, f"{path.stem} no longer reaches the hub client: update HUB_MODULES"
    else:
        assert reached == [], f"{path.stem} imports requests through {reached}"
