"""Compute capability -> engine build, and the filter over it."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_cuda import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cuda_arch import (
    arch_for_compute_cap,
    cuda_build_target,
)


def test_gb10_names_its_arch_and_never_uses_the_spark_target():
    # The real source's cuda-spark passes an EMPTY arch: nvcc's default (sm_75), no native GB10 code.
    assert cuda_build_target("12.1") == {
        "arch": "sm_121",
        "make_target": "cuda",
        "make_args": ["CUDA_ARCH=sm_121"],
    }


@pytest.mark.parametrize(
    "compute_cap, arch",
    [
        ("12.1", "sm_121"),
        ("12.0", "sm_120"),
        ("10.0", "sm_100"),
        ("10.3", "sm_103"),
        ("9.0", "sm_90"),
        ("8.9", "sm_89"),
        ("7.5", "sm_75"),
    ],
)
def test_every_gpu_builds_cuda_with_its_arch(compute_cap, arch):
    assert cuda_build_target(compute_cap) == {
        "arch": arch,
        "make_target": "cuda",
        "make_args": [f"CUDA_ARCH={arch}"],
    }


def test_h200_as_captured_builds_sm_90():
    # The real H200's nvidia-smi printed compute_cap 9.0 (tests/unit/fixtures/h200/smi_query_noheader.stdout).
    assert cuda_build_target("9.0")["make_args"] == ["CUDA_ARCH=sm_90"]


def test_numbers_from_yaml():
    assert arch_for_compute_cap(12.1) == "sm_121"
    assert arch_for_compute_cap(9) == "sm_90"
    assert arch_for_compute_cap(" 9.0 ") == "sm_90"


def test_override():
    assert cuda_build_target("12.1", "sm_120") == {
        "arch": "sm_120",
        "make_target": "cuda",
        "make_args": ["CUDA_ARCH=sm_120"],
    }
    assert cuda_build_target(None, "sm_121") == {
        "arch": "sm_121",
        "make_target": "cuda",
        "make_args": ["CUDA_ARCH=sm_121"],
    }
    assert cuda_build_target("9.0", "sm_90a")["make_args"] == ["CUDA_ARCH=sm_90a"]
    assert cuda_build_target("9.0", "")["arch"] == "sm_90"


@pytest.mark.parametrize(
    "bad", ["12", "12.10", "sm_121", "twelve", "", "0.0", "[N/A]", 7.55, None, True, ["12.1"]]
)
def test_bad_compute_cap_is_named(bad):
    with pytest.raises(ValueError, match="compute capability") as caught:
        cuda_build_target(bad)
    assert repr(bad) in str(caught.value)


@pytest.mark.parametrize("bad", ["121", "sm121", "compute_121", "sm_1", 121])
def test_bad_override_is_named(bad):
    with pytest.raises(ValueError, match="override") as caught:
        cuda_build_target("12.1", bad)
    assert repr(bad) in str(caught.value)


def test_filter():
    build = FilterModule().filters()["cuda_build_target"]
    assert build("12.1")["make_args"] == ["CUDA_ARCH=sm_121"]
    assert build("12.0", override="sm_121")["arch"] == "sm_121"
    with pytest.raises(AnsibleFilterError, match=r"ds4.fleet.cuda_build_target: compute capability '1,2'"):
        build("1,2")
