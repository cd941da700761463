"""Make the repository importable as the collection `ds4.fleet` in tests, as Ansible sees it."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))
