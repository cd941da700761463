"""tests/sandbox/callback/ds4_sandbox_payload_cache.py: a run's module payloads land in the store named by
the fingerprint, which changes with any file of the collection's modules or module_utils; a run that cannot
use the store builds its own payloads as before; the run's own temporary directory goes, the store stays."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CALLBACKS = ROOT / "tests" / "sandbox" / "callback"
spec = importlib.util.spec_from_file_location("payload_cache", CALLBACKS / "ds4_sandbox_payload_cache.py")
payload_cache = importlib.util.module_from_spec(spec)
spec.loader.exec_module(payload_cache)


def plugins(tmp_path):
    for folder, name in (("modules", "ds4_thing.py"), ("module_utils", "ds4_util.py")):
        (tmp_path / "plugins" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "plugins" / folder / name).write_text("X = 1\n")
    return tmp_path / "plugins"


def test_the_fingerprint_follows_every_module_and_module_utils_file(tmp_path):
    tree = plugins(tmp_path)
    first = payload_cache.fingerprint(tree)
    assert payload_cache.fingerprint(tree) == first
    (tree / "module_utils" / "ds4_util.py").write_text("X = 22\n")
    second = payload_cache.fingerprint(tree)
    (tree / "modules" / "ds4_new.py").write_text("")
    assert len({first, second, payload_cache.fingerprint(tree)}) == 3


def test_the_run_cache_links_to_the_store_once(tmp_path):
    tree, local = plugins(tmp_path), tmp_path / "ansible-local-1"
    local.mkdir()
    target = payload_cache.link_cache(str(local), str(tmp_path / "store"), tree)
    assert target == tmp_path / "store" / payload_cache.fingerprint(tree) and target.is_dir()
    assert (local / "ansiballz_cache").resolve() == target
    # A run whose cache exists already (it built a payload) keeps it.
    assert payload_cache.link_cache(str(local), str(tmp_path / "store"), tree) is None


def test_a_run_fills_the_store_and_removes_its_own_directory(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.stat:\n        path: /\n"
    )
    local = tmp_path / "local"
    local.mkdir()
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
        ANSIBLE_CALLBACKS_ENABLED="ds4_sandbox_payload_cache",
        DS4_SANDBOX_PAYLOAD_CACHE=str(tmp_path / "store"),
        ANSIBLE_LOCAL_TEMP=str(local),
    )
    for _ in range(2):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 and "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
    (store,) = (tmp_path / "store").iterdir()
    assert [path.name for path in store.glob("*-none")] == ["ansible.modules.stat-ZIP_DEFLATED-none"]
    assert list(local.iterdir()) == []
