"""Run an Ansible module's main() in-process, as the module tests do."""

import contextlib
import io
import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(module, args: dict) -> tuple[int, dict]:
    """Exit code and JSON result of module.main() with these arguments (exit_json and fail_json both exit)."""
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        module.main()
    return exc.value.code, json.loads(out.getvalue())
