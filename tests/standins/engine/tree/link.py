"""STAND-IN build step of the ds4 engine (test infrastructure of ds4-fleet, NOT the real engine).

The real Makefile compiles CUDA kernels with nvcc and links one engine library into every binary. Here
"linking" a program packs ds4_common.py, the program's module and a __main__ holding the build identity
(release, flavour, GPU arch, CUDA release) into one executable Python zipapp, so the result stands alone
wherever it is copied. A release of flavour `build-broken` fails here, as a compile error would.

What nvcc would embed as GPU code goes into the member FATBIN, which the cuobjdump stand-in
(tests/standins/gpu/cuobjdump) lists: a cubin (SASS) and PTX for the arch built for. With an empty arch
nvcc builds for its own default, sm_75 with CUDA 13 (seen on real hardware) and sm_52 before; with
`native` it builds for GPU 0 (asked of nvidia-smi here, of the driver by the real nvcc). Whether the
program carries the Spark weight-read cache (`--spark-cache`: 1, runtime, or empty) is baked in too.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import zipapp

PROGRAMS = {"ds4": "ds4_cli", "ds4-server": "ds4_server", "ds4-bench": "ds4_bench"}
SHARED = "ds4_common.py"
# The fork's own endpoints: in the fork's releases alone (make_repo.py), linked into every program there.
FORK_API = "ds4_fork_api.py"
# The distributed mode's code, linked into every program as the engine links its library.
DIST = "ds4_dist.py"
# The tensor-parallel mode's, beside it (its flags exist on upstream's builds alone).
TENSOR = "ds4_tensor.py"
INTERPRETER = "/usr/bin/env python3"
FATBIN = ".nv_fatbin.json"
# nvcc's -arch when none is given, by CUDA major release.
NVCC_DEFAULT_ARCH = {"13": "sm_75"}
NVCC_DEFAULT_ARCH_BEFORE_13 = "sm_52"

MAIN_TEMPLATE = """\
# STAND-IN ds4 engine program (test infrastructure of ds4-fleet, NOT the real engine), made by link.py.
import sys

import ds4_common
import {module}

BUILD = ds4_common.Build(
    program={program!r},
    version={version!r},
    flavour={flavour!r},
    arch={arch!r},
    cuda={cuda!r},
    spark_cache={spark_cache!r},
    lineage={lineage!r},
)
sys.exit({module}.main(sys.argv[1:], BUILD))
"""


def read_release(path: str) -> dict:
    """RELEASE: `key=value` lines (version, flavour, and lineage upstream) written into each commit by the
    repository maker."""
    release = {}
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            if "=" in line and not line.startswith("#"):
                key, value = line.strip().split("=", 1)
                release[key] = value
    return release


def native_arch() -> str:
    """GPU 0's arch, for -arch=native; without a GPU the build fails, as nvcc's does (wording a guess)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("nvcc fatal   : Could not find a GPU for -arch=native") from None
    major, _, minor = out.partition(".")
    return f"sm_{major}{minor}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, choices=sorted(PROGRAMS))
    parser.add_argument("--arch", required=True, help="the -arch nvcc gets; empty for nvcc's default")
    parser.add_argument("--spark-cache", default="", help="1, runtime, or empty: the Spark weight-read cache")
    parser.add_argument("--nvcc-version", required=True, help="the saved output of `nvcc --version`")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    release = read_release("RELEASE")
    module = PROGRAMS[args.program]
    with open(args.nvcc_version, encoding="utf-8") as stream:
        found = re.search(r"release (\d+\.\d+)", stream.read())
    cuda = found.group(1) if found else "unknown"
    arch = args.arch or NVCC_DEFAULT_ARCH.get(cuda.split(".")[0], NVCC_DEFAULT_ARCH_BEFORE_13)
    if arch == "native":
        arch = native_arch()
    print(
        f"  NVCC  {SHARED} {module}.py -> {args.program} [-arch={args.arch or '(none)'}, CUDA {cuda}]",
        flush=True,
    )
    if release["flavour"] == "build-broken":
        print(
            f"{module}.py:1: error: this release does not build (stand-in release flavour 'build-broken')",
            file=sys.stderr,
        )
        return 1

    stage = os.path.join("build", args.program)
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    for source in (SHARED, DIST, TENSOR, f"{module}.py", FORK_API):
        if source != FORK_API or os.path.exists(source):
            shutil.copyfile(source, os.path.join(stage, source))
    with open(os.path.join(stage, FATBIN), "w", encoding="utf-8") as stream:
        json.dump({"elf": [arch], "ptx": [arch]}, stream)
    with open(os.path.join(stage, "__main__.py"), "w", encoding="utf-8") as stream:
        stream.write(
            MAIN_TEMPLATE.format(
                module=module,
                program=args.program,
                version=release["version"],
                flavour=release["flavour"],
                arch=arch,
                cuda=cuda,
                spark_cache=args.spark_cache,
                # RELEASE of an upstream commit says so; the fork's releases predate the key.
                lineage=release.get("lineage", "fork"),
            )
        )
    temporary = args.out + ".tmp"
    zipapp.create_archive(stage, temporary, interpreter=INTERPRETER)
    os.chmod(temporary, 0o755)
    os.replace(temporary, args.out)
    print(f"  LD    {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
