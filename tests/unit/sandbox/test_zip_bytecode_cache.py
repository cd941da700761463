"""tests/sandbox/zip_bytecode_cache.py: a module imported from a zip compiles once and is loaded from the
cache after, under the name of the zip it came from this time; without a writable cache it imports as
before. Each case runs in a Python of its own, as a sandbox host's interpreter loads the cache at its start.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

CACHE_MODULE = Path(__file__).resolve().parents[3] / "tests" / "sandbox" / "zip_bytecode_cache.py"
# A module as AnsiballZ ships them: source only, a function whose code object is nested in the module's.
SOURCE = "def where():\n    raise RuntimeError('here')\nANSWER = 42\n"
IMPORT = """
import sys, traceback
sys.path.insert(0, {cache_dir!r})
import zip_bytecode_cache
zip_bytecode_cache.CACHE = {cache!r}
sys.path.insert(0, {archive!r})
import payload_module
assert payload_module.ANSWER == 42
try:
    payload_module.where()
except RuntimeError as error:
    print(traceback.extract_tb(error.__traceback__)[-1].filename)
"""


def payload(directory: Path) -> str:
    archive = directory / "payload.zip"
    directory.mkdir()
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("payload_module.py", SOURCE)
    return str(archive)


def import_from(archive: str, cache: Path) -> str:
    script = IMPORT.format(cache_dir=str(CACHE_MODULE.parent), cache=str(cache), archive=archive)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_second_import_is_loaded_from_the_cache_under_its_own_zips_name(tmp_path):
    cache = tmp_path / "cache"
    first, second = payload(tmp_path / "one"), payload(tmp_path / "two")
    assert import_from(first, cache).strip() == f"{first}/payload_module.py"
    (cached,) = cache.iterdir()
    # The second import's code is the cached one: a stamp on the cached file would be gone if it compiled.
    stamp = cached.stat().st_mtime_ns
    assert import_from(second, cache).strip() == f"{second}/payload_module.py"
    assert cached.stat().st_mtime_ns == stamp and list(cache.iterdir()) == [cached]


def test_without_a_writable_cache_the_module_compiles_as_before(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache's directory would be")
    archive = payload(tmp_path / "one")
    assert import_from(archive, blocked / "cache").strip() == f"{archive}/payload_module.py"


def test_a_damaged_cache_entry_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    archive = payload(tmp_path / "one")
    import_from(archive, cache)
    (cached,) = cache.iterdir()
    cached.write_bytes(b"\x00not marshal")
    assert import_from(archive, cache).strip() == f"{archive}/payload_module.py"
    assert cached.read_bytes() != b"\x00not marshal"
