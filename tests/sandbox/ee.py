#!/usr/bin/env python3
"""Build the execution environment that execution-environment.yml describes, for `make ee`.

The steps the file's comment names, in one place that `make ee` and the ee scenario both run:
1. the base image: `--base IMAGE` (any image with Python 3.11+, pip and an SSH client), or else
   execution-environment.yml's own `localhost/ds4-ee-base`, made here from the sandbox's Debian image;
2. the collection, built into dist/ds4-fleet.tar.gz, where the file takes it from;
3. the Python packages the image needs, downloaded by this machine's pip (its index, proxy and certificate
   authorities) into .sandbox/ee/wheels: the build installs only those (PIP_NO_INDEX), so a build needs
   no index that the build's containers could not verify;
4. `ansible-builder build` of the image.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import sandbox
import yaml

ROOT = sandbox.ROOT
DEFINITION = ROOT / "execution-environment.yml"
DIST = ROOT / "dist"
WORK = sandbox.STATE / "ee"
# What ansible-builder itself installs in its stages, beside the packages execution-environment.yml names.
BUILDER_PACKAGES = ["bindep", "pyyaml", "packaging", "dumb-init==1.2.5"]


def tool(name: str) -> str:
    """NAME from the Python environment this runs in (the checkout's .venv), else from PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


def run(*argv: str | Path, stdin: str | None = None, cwd: Path = ROOT) -> None:
    print("ee:", " ".join(str(arg) for arg in argv)[:200], flush=True)
    subprocess.run([str(arg) for arg in argv], input=stdin, text=True, cwd=cwd, check=True)


def base_image(definition: dict) -> str:
    """execution-environment.yml's base image, made from the sandbox's image: Python 3 with pip, and an SSH
    client (the sandbox's openssh-server brings it)."""
    name = definition["images"]["base_image"]["name"]
    sandbox.ensure_image()
    # Without the sandbox hosts' bytecode cache: it tunes the test Sparks, not what AWX runs.
    dockerfile = (
        f"FROM {sandbox.IMAGE}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends python3-pip"
        " && rm -rf /var/lib/apt/lists/* /usr/lib/python3/dist-packages/ds4_sandbox_zip_bytecode_cache.*\n"
    )
    run("podman", "build", "-q", "-t", name, "-f", "-", ROOT / "meta", stdin=dockerfile)
    return name


def wheels(definition: dict, directory: Path) -> None:
    deps = definition["dependencies"]
    run(
        sys.executable, "-m", "pip", "download", "--quiet", "--dest", directory,
        deps["ansible_core"]["package_pip"], "--requirement", ROOT / deps["python"],
        deps["ansible_runner"]["package_pip"], *BUILDER_PACKAGES,
    )  # fmt: skip


def collection() -> None:
    shutil.rmtree(DIST, ignore_errors=True)
    run(tool("ansible-galaxy"), "collection", "build", "--output-path", DIST, ".")
    (built,) = DIST.glob("ds4-fleet-*.tar.gz")
    built.rename(DIST / "ds4-fleet.tar.gz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="localhost/ds4-fleet-ee:latest", help="the tag of the image built")
    parser.add_argument("--base", help="the base image; by default one made from the sandbox's image")
    args = parser.parse_args(argv)

    definition = yaml.safe_load(DEFINITION.read_text())
    base = args.base or base_image(definition)
    wheel_dir = WORK / "wheels"
    wheels(definition, wheel_dir)
    collection()
    shutil.rmtree(WORK / "context", ignore_errors=True)
    run(
        tool("ansible-builder"), "build", "--file", DEFINITION, "--context", WORK / "context",
        "--tag", args.image,
        "--container-runtime", "podman",
        "--build-arg", f"EE_BASE_IMAGE={base}",
        "--build-arg", "PIP_NO_INDEX=1", "--build-arg", "PIP_FIND_LINKS=/wheels",
        f"--extra-build-cli-args=-v {wheel_dir}:/wheels:ro",
    )  # fmt: skip
    print(f"ee: built {args.image} (base {base})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
