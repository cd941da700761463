"""Which build of the ds4 engine a GPU needs: its CUDA architecture and the generic make invocation.

This gives the arch and `make cuda CUDA_ARCH=sm_NNN`, which names the arch in every release seen. A GB10
(sm_121) is then built as the engine's authors build it, with `make cuda-spark` (the Spark weight-read
cache, fork v0.5.5 on), wherever the release's own Makefile shows that target builds native GB10 code:
the plan reads it (module_utils/_engine/make_target.py). Where `cuda-spark` passes an EMPTY arch (upstream
8d57664: nvcc's default sm_75, JIT-compiled PTX on a GB10) the generic build stays, and is said so. The
built binary is checked all the same (module_utils/_engine/cubin.py).
"""

import re

MAKE_TARGET = "cuda"

# Compute capability as nvidia-smi prints it (12.1, 9.0); an arch as nvcc names it, with the
# arch-specific (a) or family (f) suffixes nvcc 12.8+ accepts (sm_90a, sm_100a, sm_120f).
_COMPUTE_CAP = re.compile(r"(\d{1,2})\.(\d)")
_ARCH = re.compile(r"sm_\d{2,3}[af]?")


def arch_for_compute_cap(compute_cap):
    """'12.1' -> 'sm_121', '9.0' -> 'sm_90'. Raises ValueError naming a value that is not MAJOR.MINOR."""
    if isinstance(compute_cap, bool) or not isinstance(compute_cap, (str, float, int)):
        raise ValueError(f"compute capability {compute_cap!r} is not a MAJOR.MINOR string like '12.1'")
    # YAML may hand over 12.1 as a float or 9 as an int; a float like 7.55 is refused, not rounded.
    text = f"{compute_cap}.0" if isinstance(compute_cap, int) else str(compute_cap).strip()
    match = _COMPUTE_CAP.fullmatch(text)
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"compute capability {compute_cap!r} is not a MAJOR.MINOR string like '12.1'")
    return f"sm_{int(match.group(1))}{match.group(2)}"


def cuda_build_target(compute_cap, override=None):
    """The engine build for a GPU of COMPUTE_CAP, or for the arch OVERRIDE names (COMPUTE_CAP may be None):
    {'arch': 'sm_121', 'make_target': 'cuda', 'make_args': ['CUDA_ARCH=sm_121']}."""
    if override not in (None, ""):
        if not isinstance(override, str) or not _ARCH.fullmatch(override.strip()):
            raise ValueError(
                f"CUDA arch override {override!r} is not of the form sm_NN or sm_NNN (e.g. sm_121)"
            )
        arch = override.strip()
    else:
        arch = arch_for_compute_cap(compute_cap)
    return {"arch": arch, "make_target": MAKE_TARGET, "make_args": [f"CUDA_ARCH={arch}"]}
