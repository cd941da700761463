"""Without requests on the target, the modules that reach the hub say what is missing, with no traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
