"""Sandbox hosts only: a bytecode cache for Python modules imported from zip files.

Every Ansible task's module reaches a host as a zip (AnsiballZ) that Python imports with zipimport, which
compiles each source file afresh and never caches: about 0.1 s of CPU a task on the 2-core test machines,
a quarter of what a task costs there, paid again for each of the suite's many thousand tasks. The sandbox
image loads this module at every interpreter's start (a .pth file beside it, tests/sandbox/sandbox.py) and
lets zipimport look up the compiled code of a source it has compiled before, by the source's digest.

Only what is compiled changes hands: the code is exactly what compile() returns for the same source, with
the file name of this import, so tracebacks name the zip they came from. The cache directory is root's and
not writable by others (a module run as another user reads it or compiles as before). Real Sparks do not
have this; it makes the sandbox cheaper, not different.
"""

import marshal
import os
import sys
import types
import zipimport

CACHE = "/var/cache/ds4-sandbox-zip-bytecode/" + sys.implementation.cache_tag
_compile_source = zipimport._compile_source


def _named(code, filename):
    """CODE, and the code objects within it, as compiled from FILENAME."""
    consts = tuple(_named(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _cached_compile_source(pathname, source):
    import hashlib

    path = os.path.join(CACHE, hashlib.blake2b(source, digest_size=20).hexdigest())
    try:
        with open(path, "rb") as cached:
            code = marshal.load(cached)
        if isinstance(code, types.CodeType):
            return _named(code, pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(CACHE, mode=0o755, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, path)
    except OSError:
        pass
    return code


zipimport._compile_source = _cached_compile_source
