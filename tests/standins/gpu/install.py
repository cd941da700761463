#!/usr/bin/env python3
"""Lay the GPU stand-ins out in a root filesystem, as one persona, or take them away (`none`).

    python3 tests/standins/gpu/install.py --root ROOT --persona gb10

writes ROOT/usr/bin/nvidia-smi and nvidia-modprobe, ROOT/usr/local/cuda/bin/nvcc and cuobjdump,
ROOT/usr/local/cuda/version.json (where the persona has one) and ROOT/etc/ds4-standin/gpu.json. Running
it again with another persona switches cleanly; `none` removes all of it. It never overwrites a real tool.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import personas  # noqa: E402  (a sibling file, found through the line above)

MARKER = b"DS4-STANDIN"
TOOLS = {
    "nvidia-smi": "usr/bin/nvidia-smi",
    "nvcc": "usr/local/cuda/bin/nvcc",
    "cuobjdump": "usr/local/cuda/bin/cuobjdump",
    "nvidia-modprobe": "usr/bin/nvidia-modprobe",
}
PERSONA_FILE = "etc/ds4-standin/gpu.json"
# What a test writes beside it to make nvidia-smi report a throttled GPU (see nvidia-smi).
THROTTLE_FILE = "etc/ds4-standin/gpu-throttle"
# ... and to make it list other compute processes on the GPU.
APPS_FILE = "etc/ds4-standin/gpu-apps"
VERSION_JSON = "usr/local/cuda/version.json"
# Folders this installer creates and removes again once empty; never usr/bin or etc themselves.
OWN_DIRS = ("usr/local/cuda/bin", "usr/local/cuda", "etc/ds4-standin")


def refuse_real_tool(path):
    if path.is_symlink() or (path.exists() and MARKER not in path.read_bytes()[:400]):
        raise SystemExit(f"{path} is not a ds4 stand-in (a real tool?): refusing to touch it")


def remove(root):
    for relative in TOOLS.values():
        path = root / relative
        refuse_real_tool(path)
        path.unlink(missing_ok=True)
    (root / PERSONA_FILE).unlink(missing_ok=True)
    (root / THROTTLE_FILE).unlink(missing_ok=True)
    (root / APPS_FILE).unlink(missing_ok=True)
    version_json = root / VERSION_JSON
    # Only ours: a stand-in nvcc beside it (checked above) means the toolkit folder is the stand-in's.
    version_json.unlink(missing_ok=True)
    for relative in OWN_DIRS:
        folder = root / relative
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def install(root, name):
    persona = personas.build(name)
    for relative in TOOLS.values():
        refuse_real_tool(root / relative)
    remove(root)
    if persona is None:
        return
    for tool, relative in TOOLS.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / tool, target)
        target.chmod(0o755)
    version_json = persona.pop("version_json")
    if version_json is not None:
        (root / VERSION_JSON).write_text(version_json)
    persona_file = root / PERSONA_FILE
    persona_file.parent.mkdir(parents=True, exist_ok=True)
    persona_file.write_text(json.dumps(persona, indent=1) + "\n")
    os.chmod(persona_file, 0o644)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/", type=Path, help="root filesystem to lay the tools out in")
    parser.add_argument("--persona", default="gb10", choices=personas.NAMES, help="the machine to play")
    args = parser.parse_args(argv)
    install(args.root, args.persona)


if __name__ == "__main__":
    main()
