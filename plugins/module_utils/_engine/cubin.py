"""Whether a built engine program carries native GPU code (SASS) for the arch it was built for.

nvcc embeds, per arch it compiled for, a cubin (native code) and/or PTX (which the driver JIT-compiles
at start-up). A build whose Makefile dropped the arch still links and runs, from nvcc's default arch
(sm_75 with CUDA 13): on a GB10 that means JIT-compiled PTX, ~25% slower, and nothing fails. So the
only truth is the binary: `cuobjdump --list-elf PROGRAM`, from the toolkit that built it, lists one line
per embedded cubin, as the real tool printed them for the real engine built with CUDA_ARCH=sm_90
(tests/unit/fixtures/h200/engine/sm_90/):

    ELF file    1: ds4_server-ds4_kvstore-rax-ds4-ds4_cuda.sm_90.cubin
    ELF file    2: ds4_cuda.sm_90.cubin

A binary with PTX only lists none; one with no GPU code at all makes the tool exit 255.
"""

from __future__ import annotations

import os
import re

CUOBJDUMP = "cuobjdump"
# `ELF file <n>: <name>.sm_<NN>[a|f].cubin`; the name may itself contain dots.
_ELF_LINE = re.compile(r"ELF file\s+\d+:\s+\S*?\b(sm_\d{2,3}[af]?)\.cubin")
_SUFFIX = re.compile(r"[af]$")


class CubinError(Exception):
    """The check could not run, or the program lacks native code for the arch; the message says which."""


def cuobjdump_for(nvcc):
    """The cuobjdump of the toolkit whose nvcc built the release: the one beside it."""
    return os.path.join(os.path.dirname(nvcc), CUOBJDUMP)


def list_elf_argv(cuobjdump, program):
    return [cuobjdump, "--list-elf", program]


def parse_list_elf(text):
    """The archs of the cubins `cuobjdump --list-elf` lists, sorted, each once: ['sm_121'] or []."""
    return sorted({match.group(1) for match in _ELF_LINE.finditer(text or "")})


def is_native_for(cubin_arch, arch):
    """sm_121a (arch-specific) and sm_121f (family) cubins are native code for sm_121 as well."""
    return _SUFFIX.sub("", cubin_arch) == _SUFFIX.sub("", arch)


def check_program(run, cuobjdump, program, arch):
    """The cubin archs of PROGRAM; raises CubinError unless one is native code for ARCH.

    RUN(argv) -> (rc, stdout). A missing cuobjdump is an error: an unchecked build is not accepted.
    """
    if not (os.path.isfile(cuobjdump) and os.access(cuobjdump, os.X_OK)):
        raise CubinError(
            f"cannot check which GPU code {os.path.basename(program)} holds: {cuobjdump} (cuobjdump of the "
            "CUDA toolkit that built it, beside its nvcc) is missing or not executable"
        )
    rc, out = run(list_elf_argv(cuobjdump, program))
    if rc != 0:
        raise CubinError(f"`{' '.join(list_elf_argv(cuobjdump, program))}` exited {rc}")
    archs = parse_list_elf(out)
    if not any(is_native_for(found, arch) for found in archs):
        found = (
            f"cubins for {', '.join(archs)} only" if archs else "no cubin at all (PTX only, or no GPU code)"
        )
        raise CubinError(
            f"the built {os.path.basename(program)} holds no native code (SASS) for {arch}: "
            f"`cuobjdump --list-elf` lists {found}. The release's Makefile did not build for the arch it "
            "was given; on the GPU it would run JIT-compiled PTX (slower) or not at all"
        )
    return archs
