"""Which make target a release's Makefile gets (_engine/make_target.py), on each shape of Makefile
the engine has had: cuda-spark naming the GB10's arch (fork v0.5.5 on), passing an empty arch (upstream
8d57664, the source in shared/engine-source), an alias of cuda-generic (CUDA_ARCH=native, the October 2026
fork tree), and none at all."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import (
    MakeTargetError,
    choose,
    parse_makefile,
    spark_verdict,
    targets_of,
)

GB10 = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
H200 = {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}
SPARK_BUILD = {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
PROGRAMS = "ds4 ds4-server ds4-bench"

# The shape of upstream 8d57664: cuda-spark runs a sub-make with an EMPTY arch, inside a conditional.
EMPTY_ARCH = f"""\
CUDA_ARCH ?=
ifneq ($(strip $(CUDA_ARCH)),)
NVCC_ARCH_FLAGS := -arch=$(CUDA_ARCH)
endif
.PHONY: all cuda cuda-spark cuda-generic
ifeq ($(UNAME_S),Darwin)
all: {PROGRAMS}
else
all: help
help:
\t@echo "  make cuda CUDA_ARCH=sm_N Build CUDA with an explicit nvcc -arch value"
cuda-spark:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=
cuda-generic:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=native
cuda:
\t@if [ -z "$(strip $(CUDA_ARCH))" ]; then \\
\t\techo "error: specify CUDA_ARCH, for example: make cuda CUDA_ARCH=sm_120"; \\
\t\texit 2; \\
\tfi
\t$(MAKE) {PROGRAMS} CUDA_ARCH="$(CUDA_ARCH)"
endif
"""
# Fork v0.5.5 on: cuda-spark names the arch (through a variable) and compiles the Spark cache.
NAMED_ARCH = f"""\
SPARK_ARCH ?= sm_121a
cuda-spark:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=$(SPARK_ARCH) SPARK_FLAGS=-DDS4_CUDA_SPARK_HBM_CACHE=1
cuda:
\t$(MAKE) {PROGRAMS} CUDA_ARCH="$(CUDA_ARCH)"
"""
# The October 2026 fork tree: cuda-spark an alias of cuda-generic, which builds for the GPU present.
ALIAS = f"""\
cuda-generic:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=native
cuda-spark: cuda-generic
cuda:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=$(CUDA_ARCH)
"""
NO_SPARK = f"""\
cuda:
\t$(MAKE) {PROGRAMS} CUDA_ARCH=$(CUDA_ARCH)
"""


def test_a_spark_target_that_names_the_gb10_arch_is_used():
    chosen = choose(GB10, NAMED_ARCH)
    assert chosen["build_target"] == SPARK_BUILD and chosen["without_spark_target"] is False
    assert chosen["reason"] == "the Spark target: its Makefile's cuda-spark builds for sm_121a, the GB10's"


@pytest.mark.parametrize(
    "recipe",
    [
        "cuda-spark: CUDA_ARCH := sm_121\ncuda-spark: cuda\n",
        "cuda-spark:\n\t$(MAKE) cuda CUDA_ARCH='sm_121a'\n",
        'cuda-spark:\n\t+$(MAKE) ds4 CUDA_ARCH="compute_121a"\n',
    ],
)
def test_other_ways_of_naming_the_arch(recipe):
    assert choose(GB10, recipe + NO_SPARK)["build_target"] == SPARK_BUILD


def test_an_empty_arch_falls_back_to_the_generic_target_and_says_why():
    chosen = choose(GB10, EMPTY_ARCH, gpu_arch="sm_121")
    assert chosen["build_target"] == GB10 and chosen["without_spark_target"] is True
    assert chosen["reason"].startswith(
        "built without the Spark target, with make cuda CUDA_ARCH=sm_121, because its Makefile's "
        "cuda-spark passes an empty CUDA_ARCH: nvcc would build for its own default arch"
    )
    assert "Spark weight-read cache" in chosen["reason"] and "ds4_engine_make_targets" in chosen["reason"]
    assert "\n" not in chosen["reason"]


def test_an_alias_of_a_native_target_is_used_on_a_gb10_only():
    chosen = choose(GB10, ALIAS, gpu_arch="sm_121")
    assert chosen["build_target"] == SPARK_BUILD
    assert "alias of cuda-generic, which builds for the GPU present (native), a GB10" in chosen["reason"]
    # Built for a GB10 elsewhere (ds4_cuda_arch on an H200), `native` would be the H200's code.
    elsewhere = choose(GB10, ALIAS, gpu_arch="sm_90")
    assert elsewhere["build_target"] == GB10 and elsewhere["without_spark_target"]
    assert (
        "(through cuda-generic) builds for the GPU present (native), and this host has a sm_90"
        in (elsewhere["reason"])
    )
    assert "this host has no GPU" in choose(GB10, ALIAS)["reason"]


def test_a_makefile_without_the_spark_target_falls_back():
    chosen = choose(GB10, NO_SPARK)
    assert chosen["build_target"] == GB10 and chosen["without_spark_target"]
    assert "because its Makefile has no cuda-spark target" in chosen["reason"]
    assert "the release has no Makefile at its top" in choose(GB10, None)["reason"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("cuda-spark:\n\t$(MAKE) ds4 CUDA_ARCH=sm_120\n", "builds for sm_120, not for the GB10"),
        ("cuda-spark:\n\t./build-spark.sh\n", "does not say which CUDA_ARCH it builds for"),
        ("cuda-spark:\n\t@echo make cuda CUDA_ARCH=sm_121\n", "does not say which CUDA_ARCH"),
        ("cuda-spark: cuda-spark\n", "does not say which CUDA_ARCH"),
    ],
)
def test_what_cannot_be_read_as_a_gb10_build_falls_back(text, why):
    spark, reason = spark_verdict(text, "sm_121")
    assert spark is False and why in reason


def test_other_arches_keep_the_generic_target_without_reading_the_makefile():
    chosen = choose(H200, None)
    assert chosen == {
        "build_target": H200,
        "reason": "sm_90 is not a GB10: the generic CUDA target for its arch",
        "without_spark_target": False,
    }


def test_the_operator_names_the_target_for_an_arch():
    chosen = choose(GB10, NAMED_ARCH, "cuda")
    assert chosen["build_target"] == GB10 and chosen["without_spark_target"]
    assert chosen["reason"] == "ds4_engine_make_targets names cuda for sm_121"
    # Named on an empty-arch Makefile, cuda-spark is built: the native-code check after the build judges.
    assert choose(GB10, EMPTY_ARCH, "cuda-spark")["build_target"] == SPARK_BUILD
    generic = choose(H200, EMPTY_ARCH, "cuda-generic")
    assert generic["build_target"] == {"arch": "sm_90", "make_target": "cuda-generic", "make_args": []}
    assert generic["without_spark_target"] is False


def test_an_unknown_target_or_one_the_makefile_lacks_is_refused_naming_the_setting():
    with pytest.raises(
        MakeTargetError, match=r"^ds4_engine_make_targets names 'all' for sm_121, which is not"
    ):
        choose(GB10, NAMED_ARCH, "all")
    with pytest.raises(
        MakeTargetError,
        match=r"^ds4_engine_make_targets names cuda-spark for sm_121, but the release's Makefile has no "
        r"cuda-spark target",
    ):
        choose(GB10, NO_SPARK, "cuda-spark")
    with pytest.raises(MakeTargetError, match="has no cuda target"):
        choose(GB10, None, "cuda")


def test_the_parser_reads_rules_recipes_and_variables():
    makefile = parse_makefile(EMPTY_ARCH)
    assert makefile["vars"]["CUDA_ARCH"] == ""
    assert makefile["rules"]["cuda-spark"]["recipe"] == [f"$(MAKE) {PROGRAMS} CUDA_ARCH="]
    assert targets_of(EMPTY_ARCH) == ["all", "cuda", "cuda-generic", "cuda-spark", "help"]
    # A continued recipe line is one line; a variable is not a rule.
    assert len(makefile["rules"]["cuda"]["recipe"]) == 2
    assert "NVCC_ARCH_FLAGS" not in makefile["rules"]


BUNDLE = Path("/work/shared/engine-source/ds4-8d57664.bundle")
H200_SPARK = Path(__file__).resolve().parents[3] / "fixtures" / "h200" / "engine" / "sm_121"


@pytest.mark.skipif(not BUNDLE.is_file() or not shutil.which("git"), reason="the real source is not here")
def test_the_real_makefile_of_upstream_8d57664_gets_the_fallback(tmp_path):
    subprocess.run(["git", "clone", "--quiet", "--bare", str(BUNDLE), str(tmp_path / "ds4.git")], check=True)
    text = subprocess.run(
        ["git", "--git-dir", str(tmp_path / "ds4.git"), "show", "HEAD:Makefile"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    chosen = choose(GB10, text, gpu_arch="sm_90")
    assert chosen["build_target"] == GB10 and chosen["without_spark_target"]
    assert "cuda-spark passes an empty CUDA_ARCH" in chosen["reason"]
    # What the role recorded when it built this source for a GB10 on the real H200 (run.sh's spark run).
    stamp = json.loads((H200_SPARK / ".ds4-build.json").read_text())
    assert stamp["build_target"] == GB10 and stamp["make_target_reason"] == chosen["reason"]
    assert stamp["sass_archs"] == {program: ["sm_121"] for program in PROGRAMS.split()}


def test_the_units_note_for_a_stamp_of_a_gb10_built_without_the_spark_target():
    from ansible_collections.ds4.fleet.plugins.filter.ds4_cuda import FilterModule

    note = FilterModule().filters()["spark_target_note"]
    stamp = {"build_target": GB10, "make_target_reason": "because its Makefile has no cuda-spark target"}
    assert note(stamp) == "built without the Spark target (make cuda CUDA_ARCH=sm_121)"
    assert note({"build_target": SPARK_BUILD}) == note({"build_target": H200}) == note(None) == ""
