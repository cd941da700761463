"""Which native GPU code a built program holds (_engine/cubin.py), read from cuobjdump --list-elf."""

import os
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cubin import (
    CubinError,
    check_program,
    cuobjdump_for,
    is_native_for,
    parse_list_elf,
)

# Captured on the H200 by tests/unit/fixtures/h200/engine/run.sh: the programs the engine role built from
# the real source with `make cuda CUDA_ARCH=sm_90` (sm_90/), and those of its `make cuda-spark` (dropped/).
H200_CAPTURES = Path(__file__).resolve().parents[3] / "fixtures" / "h200" / "engine"

# The format of the real tool (NVIDIA's CUDA Binary Utilities), one line per embedded cubin.
ONE_ARCH = "ELF file    1: ds4-server.1.sm_121.cubin\n"
MULTI_ARCH = (
    "ELF file    1: ds4-server.1.sm_90.cubin\n"
    "ELF file    2: ds4-server.2.sm_100a.cubin\n"
    "ELF file    3: ds4-server.3.sm_121.cubin\n"
    "ELF file   12: ds4-server.12.sm_90.cubin\n"
)
# nvcc 13's default arch: what the real source's `cuda-spark` built on the H200.
DEFAULT_ARCH_ONLY = "ELF file    1: ds4-server.1.sm_75.cubin\nELF file    2: ds4-server.2.sm_75.cubin\n"
# PTX only (-gencode arch=compute_121,code=compute_121): --list-elf lists nothing.
PTX_ONLY = ""


def fake_tool(tmp_path, rc=0, out=""):
    """A cuobjdump that is never run by these tests: check_program gets its answers from RUN."""
    tool = tmp_path / "cuda" / "bin" / "cuobjdump"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 99\n")
    tool.chmod(0o755)
    calls = []

    def run(argv):
        calls.append(argv)
        return rc, out

    return str(tool), run, calls


def test_the_tool_is_the_one_beside_the_nvcc_that_built():
    assert cuobjdump_for("/usr/local/cuda-13.0/bin/nvcc") == "/usr/local/cuda-13.0/bin/cuobjdump"


@pytest.mark.parametrize(
    ("text", "archs"),
    [
        (ONE_ARCH, ["sm_121"]),
        (MULTI_ARCH, ["sm_100a", "sm_121", "sm_90"]),
        (DEFAULT_ARCH_ONLY, ["sm_75"]),
        (PTX_ONLY, []),
        ("cuobjdump info    : File 'ds4-server' does not contain device code\n", []),
        # Names with dots of their own, as nvcc's temporary file names have.
        ("ELF file    1: tmpxft_0000_00000000-6_ds4_cuda.1.sm_90.cubin\n", ["sm_90"]),
    ],
)
def test_parse_list_elf(text, archs):
    assert parse_list_elf(text) == archs


@pytest.mark.parametrize(
    ("cubin", "arch", "native"),
    [
        ("sm_121", "sm_121", True),
        ("sm_121a", "sm_121", True),
        ("sm_121f", "sm_121", True),
        ("sm_90", "sm_90a", True),
        ("sm_120", "sm_121", False),
        ("sm_75", "sm_121", False),
        ("sm_12", "sm_121", False),
    ],
)
def test_native_code_is_that_arch_with_or_without_its_suffix(cubin, arch, native):
    assert is_native_for(cubin, arch) is native


def test_a_program_with_the_arch_among_several_passes(tmp_path):
    tool, run, calls = fake_tool(tmp_path, out=MULTI_ARCH)
    assert check_program(run, tool, "/opt/ds4/releases/.build-v0.6.5/ds4-server", "sm_121") == [
        "sm_100a",
        "sm_121",
        "sm_90",
    ]
    assert calls == [[tool, "--list-elf", "/opt/ds4/releases/.build-v0.6.5/ds4-server"]]


@pytest.mark.parametrize(
    ("out", "found"),
    [
        (DEFAULT_ARCH_ONLY, "lists cubins for sm_75 only"),
        (MULTI_ARCH, "lists cubins for sm_100a, sm_121, sm_90 only"),
        (PTX_ONLY, "lists no cubin at all (PTX only, or no GPU code)"),
    ],
)
def test_a_program_without_native_code_for_the_arch_is_refused_with_what_was_found(tmp_path, out, found):
    tool, run, _ = fake_tool(tmp_path, out=out)
    arch = "sm_120" if out == MULTI_ARCH else "sm_121"
    with pytest.raises(CubinError) as refused:
        check_program(run, tool, "/x/ds4-server", arch)
    assert str(refused.value).startswith(
        f"the built ds4-server holds no native code (SASS) for {arch}: `cuobjdump --list-elf` {found}. "
    )


def test_a_missing_tool_is_refused_not_skipped(tmp_path):
    tool = str(tmp_path / "cuda" / "bin" / "cuobjdump")
    with pytest.raises(CubinError, match=f"cannot check which GPU code ds4 holds: {tool} .* is missing"):
        check_program(lambda argv: pytest.fail(f"ran {argv}"), tool, "/x/ds4", "sm_121")


def test_a_failing_tool_is_refused(tmp_path):
    tool, run, _ = fake_tool(tmp_path, rc=1, out="")
    with pytest.raises(CubinError, match=r"`.*cuobjdump --list-elf /x/ds4` exited 1"):
        check_program(run, tool, "/x/ds4", "sm_121")


def test_a_tool_that_is_not_executable_is_refused(tmp_path):
    tool, run, _ = fake_tool(tmp_path, out=ONE_ARCH)
    os.chmod(tool, 0o644)
    with pytest.raises(CubinError, match="missing or not executable"):
        check_program(run, tool, "/x/ds4", "sm_121")


@pytest.mark.skipif(
    not (H200_CAPTURES / "sm_90" / "ds4-server.list-elf.stdout").exists(),
    reason="the real H200 captures are not in tests/unit/fixtures/h200/engine yet",
)
@pytest.mark.parametrize(("build", "passes"), [("sm_90", True), ("dropped", False)])
@pytest.mark.parametrize("program", ["ds4", "ds4-server", "ds4-bench"])
def test_real_captures_from_the_h200(tmp_path, build, passes, program):
    out = (H200_CAPTURES / build / f"{program}.list-elf.stdout").read_text()
    tool, run, _ = fake_tool(tmp_path, out=out)
    if passes:
        assert "sm_90" in check_program(run, tool, program, "sm_90")
    else:
        with pytest.raises(CubinError, match="holds no native code"):
            check_program(run, tool, program, "sm_90")


@pytest.mark.parametrize("program", ["ds4", "ds4-server", "ds4-bench"])
def test_real_gb10_arch_build_on_the_h200_carries_sm_121_code_only(tmp_path, program):
    # run.sh's spark run: the role's fallback `make cuda CUDA_ARCH=sm_121` of the real source on the H200.
    out = (H200_CAPTURES / "sm_121" / f"{program}.list-elf.stdout").read_text()
    tool, run, _ = fake_tool(tmp_path, out=out)
    assert "sm_121" in check_program(run, tool, program, "sm_121")
    with pytest.raises(CubinError, match="holds no native code"):
        check_program(run, tool, program, "sm_90")
