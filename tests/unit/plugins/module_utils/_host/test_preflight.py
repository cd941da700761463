"""The preflight's verdicts, message by message: each refusal names the fact, the value seen, the value
wanted and the variable that changes it; ds4_force lets hardware through and never a lack of space.
Hosts are the real H200 capture and GB10-shaped facts; then the module itself, as Ansible calls it."""

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._host.preflight import (
    UNKNOWN_SIZE_BYTES,
    judge,
    weights_need,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_preflight_check
from module_runner import run_module

REPO = Path(__file__).resolve().parents[5]
# What ds4_host_facts returned on the real H200 machine (gguf_dir=/tmp/x).
H200_FACTS = json.loads((REPO / "tests" / "unit" / "fixtures" / "h200" / "ds4_host_facts.json").read_text())
CATALOG = yaml.safe_load((REPO / "roles" / "ds4_common" / "defaults" / "main.yml").read_text())
CATALOG = CATALOG["ds4_model_catalog"]
GIB = 1 << 30
BASE_0731 = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER_0731 = "DSpark-drafter-Q2K-Q8-0731.gguf"
BASE_LEGACY = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
MTP_LEGACY = "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
SIZE_BASE, SIZE_DRAFTER = 86720111488, 6971241504
TB = 10**12

# A DGX Spark as the facts module reports it (the GB10's own memory is the host's, flagged unified).
GB10 = {
    "arch": "aarch64",
    "gpu": {
        "present": True,
        "nvidia_smi": "/usr/bin/nvidia-smi",
        "error": None,
        "count": 1,
        "name": "NVIDIA GB10",
        "compute_cap": "12.1",
        "driver_version": "580.95.05",
        "memory_bytes": 128501256192,
        "memory_unified": True,
        "memory_source": "meminfo",
    },
    "cuda": {
        "present": True,
        "version": "13.0",
        "major": 13,
        "minor": 0,
        "source": "nvcc",
        "nvcc_path": "/usr/local/cuda/bin/nvcc",
    },
    "memory": {"total_bytes": 128501256192},
    "disk": {
        "gguf_dir": {
            "path": "/var/lib/ds4/gguf",
            "checked_path": "/var/lib",
            "free_bytes": 3 * TB,
            "device": 2049,
            "files": [],
        },
        "install_root": {"path": "/opt/ds4", "checked_path": "/opt", "free_bytes": 3 * TB, "device": 2049},
        "same_filesystem": True,
    },
    "shell_install": {"gguf_files": []},
}
NO_GPU = {"present": False, "nvidia_smi": None, "error": "nvidia-smi not found", "count": 0, "name": None,
          "compute_cap": None}  # fmt: skip
NO_CUDA = {"present": False, "version": None, "major": None, "minor": None, "source": None, "nvcc_path": None}
CUDA_12 = dict(GB10["cuda"], version="12.9", major=12, minor=9)
SMALL_WEIGHTS = {"bytes": 64 << 20, "reclaimable_bytes": 0, "label": "ds4_weights_space_bytes"}


def host(base=GB10, **changes):
    """BASE with CHANGES; a key like 'gpu' replaces that part, 'gguf_free' / 'root_free' set free bytes."""
    facts = copy.deepcopy(base)
    disk = facts["disk"]
    if "gguf_free" in changes:
        disk["gguf_dir"]["free_bytes"] = changes.pop("gguf_free")
    if "root_free" in changes:
        disk["install_root"]["free_bytes"] = changes.pop("root_free")
    if "separate" in changes:
        changes.pop("separate")
        disk["same_filesystem"] = False
        disk["gguf_dir"].update(checked_path="/var/lib/ds4", device=2050)
    facts.update(changes)
    return facts


def settings(**changes):
    base = {
        "accepted_archs": ["aarch64"],
        "accepted_compute_caps": ["12.1"],
        "cuda_major": 13,
        "force": False,
        "cuda_arch": "",
        "cuda_home": "/usr/local/cuda",
        "weights": SMALL_WEIGHTS,
        "build_bytes": 2 * GIB,
    }
    return dict(base, **changes)


H200_REFUSED = (
    "GPU compute capability is 9.0 (NVIDIA H200); wanted one of 12.1 (ds4_accepted_compute_caps); "
    "set ds4_force: true to build for it anyway"
)
X86_REFUSED = (
    "CPU architecture is x86_64; wanted one of aarch64 (ds4_accepted_archs); "
    "set ds4_force: true to build for it anyway"
)
CUDA12_REFUSED = (
    "CUDA version is 12.9 (/usr/local/cuda/bin/nvcc); wanted 13.x (ds4_cuda_major); "
    "set ds4_force: true to build with it anyway"
)
NO_GPU_REFUSED = (
    "GPU is absent (nvidia-smi not found); wanted an NVIDIA GPU, compute capability one of 12.1 "
    "(ds4_accepted_compute_caps); install the NVIDIA driver, or set ds4_force: true and ds4_cuda_arch "
    "to build without one"
)
NO_NVCC_REFUSED = (
    "CUDA compiler nvcc is absent (not in /usr/local/cuda/bin nor on PATH); wanted nvcc of CUDA 13.x "
    "(ds4_cuda_major); install the CUDA 13 toolkit, or set ds4_cuda_home to the folder it is in "
    "(ds4_force does not skip this check)"
)
SPARK_BUILD = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
H200_BUILD = {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}


def forced(message):
    """The warning ds4_force turns MESSAGE into: the fact and the wish, then why it goes on."""
    return message.rsplit("; ", 1)[0] + "; going on because ds4_force is true"


CASES = [
    # id, host facts, settings, errors, warnings, build target
    ("gb10 passes", host(), settings(), [], [], SPARK_BUILD),
    ("h200 refused", host(H200_FACTS, arch="aarch64"), settings(), [H200_REFUSED], [], H200_BUILD),
    ("h200 forced", host(H200_FACTS, arch="aarch64"), settings(force=True), [], [forced(H200_REFUSED)],
     H200_BUILD),
    ("h200 accepted by list", host(H200_FACTS, arch="aarch64"),
     settings(accepted_compute_caps=["12.1", 9.0]), [], [], H200_BUILD),
    ("x86_64 refused", host(arch="x86_64"), settings(), [X86_REFUSED], [], SPARK_BUILD),
    ("x86_64 forced", host(arch="x86_64"), settings(force=True), [], [forced(X86_REFUSED)], SPARK_BUILD),
    ("x86_64 widened", host(arch="x86_64"), settings(accepted_archs=["aarch64", "x86_64"]), [], [],
     SPARK_BUILD),
    ("cuda 12 refused", host(cuda=CUDA_12), settings(), [CUDA12_REFUSED], [], SPARK_BUILD),
    ("cuda 12 forced", host(cuda=CUDA_12), settings(force=True), [], [forced(CUDA12_REFUSED)], SPARK_BUILD),
    ("cuda 14 refused", host(cuda=dict(CUDA_12, version="14.0", major=14, minor=0)), settings(),
     ["CUDA version is 14.0 (/usr/local/cuda/bin/nvcc); wanted 13.x (ds4_cuda_major); "
      "set ds4_force: true to build with it anyway"], [], SPARK_BUILD),
    ("cuda version unreadable", host(cuda=dict(CUDA_12, version=None, major=None, minor=None)), settings(),
     ["CUDA version is unknown (/usr/local/cuda/bin/nvcc --version printed none); wanted 13.x "
      "(ds4_cuda_major); set ds4_force: true to build with it anyway"], [], SPARK_BUILD),
    ("no gpu, no cuda", host(gpu=NO_GPU, cuda=NO_CUDA), settings(), [NO_GPU_REFUSED, NO_NVCC_REFUSED], [],
     None),
    ("no gpu forced without an arch", host(gpu=NO_GPU), settings(force=True), [NO_GPU_REFUSED], [], None),
    ("no gpu forced with an arch", host(gpu=NO_GPU), settings(force=True, cuda_arch="sm_121"), [],
     [forced(NO_GPU_REFUSED)], SPARK_BUILD),
    ("no nvcc is never forced", host(cuda=NO_CUDA), settings(force=True), [NO_NVCC_REFUSED], [], SPARK_BUILD),
    ("failing driver", host(gpu=dict(NO_GPU, nvidia_smi="/usr/bin/nvidia-smi",
                                     error="nvidia-smi exited 9: NVIDIA-SMI has failed")), settings(),
     ["GPU is absent (nvidia-smi exited 9: NVIDIA-SMI has failed); wanted an NVIDIA GPU, compute capability "
      "one of 12.1 (ds4_accepted_compute_caps); install the NVIDIA driver, or set ds4_force: true and "
      "ds4_cuda_arch to build without one"], [], None),
    ("compute capability not reported", host(gpu=dict(GB10["gpu"], compute_cap=None)), settings(force=True),
     ["GPU compute capability is not reported (NVIDIA GB10); wanted one of 12.1 (ds4_accepted_compute_caps); "
      "set ds4_force: true and ds4_cuda_arch to build for it anyway"], [], None),
    ("arch override on a spark", host(), settings(cuda_arch="sm_120"), [],
     ["CUDA arch is sm_120 (ds4_cuda_arch) but the GPU's compute capability 12.1 builds for sm_121; "
      "building for sm_120 as ds4_cuda_arch says"],
     {"arch": "sm_120", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_120"]}),
    ("arch override that matches", host(), settings(cuda_arch=" sm_121 "), [], [], SPARK_BUILD),
    ("bad arch override", host(), settings(cuda_arch="121", force=True),
     ["CUDA arch override is '121'; wanted the form sm_NN or sm_NNN such as sm_121 (ds4_cuda_arch); "
      "correct it, or leave it empty to build for the GPU found"], [], None),
    ("bad accepted compute capability", host(), settings(accepted_compute_caps=["12.1", "sm_121"]),
     ["An accepted compute capability is 'sm_121'; wanted MAJOR.MINOR such as '12.1' "
      "(ds4_accepted_compute_caps); correct the list"], [], SPARK_BUILD),
    ("everything wrong, forced", host(H200_FACTS, cuda=CUDA_12), settings(force=True), [],
     [forced(X86_REFUSED), forced(H200_REFUSED), forced(CUDA12_REFUSED)], H200_BUILD),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "conf", "errors", "warnings", "target"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_hardware_verdicts(facts, conf, errors, warnings, target):
    verdict = judge(facts, conf)
    assert verdict["errors"] == errors
    assert verdict["warnings"] == warnings
    assert verdict["build_target"] == target


def test_the_real_h200_is_refused_naming_it_and_passes_forced():
    # The capture ran with gguf_dir=/tmp/x on a 64 GiB filesystem: room for 64 MiB of weights.
    assert (H200_FACTS["gpu"]["compute_cap"], H200_FACTS["cuda"]["version"]) == ("9.0", "13.0")
    conf = settings(accepted_archs=["x86_64"])
    assert judge(H200_FACTS, conf)["errors"] == [H200_REFUSED]
    verdict = judge(H200_FACTS, dict(conf, force=True))
    assert (verdict["errors"], verdict["warnings"]) == ([], [forced(H200_REFUSED)])
    assert verdict["build_target"] == H200_BUILD


def test_the_real_h200_lacks_room_for_the_real_weights_even_forced():
    weights = weights_need(_wanted("0731", "dspark"))
    assert weights["bytes"] == SIZE_BASE + SIZE_DRAFTER
    verdict = judge(H200_FACTS, settings(accepted_archs=["x86_64"], force=True, weights=weights))
    need = SIZE_BASE + SIZE_DRAFTER + 2 * GIB
    assert verdict["errors"] == [
        "Free space on the filesystem of ds4_gguf_dir /tmp/x and ds4_root /opt/ds4 (checked at /tmp) is "
        "68,686,774,272 bytes (63.97 GiB); wanted 95,838,836,640 bytes (89.26 GiB): 93,691,352,992 bytes "
        "(87.26 GiB) for the weights (the 0731 base + dspark files of ds4_model_catalog not yet in place) + "
        "2,147,483,648 bytes (2.00 GiB) for the build (ds4_build_space_bytes); short by 27,152,062,368 bytes "
        "(25.29 GiB); free space there or move ds4_gguf_dir or ds4_root to a larger filesystem (ds4_force "
        "does not skip this check)"
    ]
    assert need - 68686774272 == 27152062368
    assert verdict["space"] == [
        {
            "paths": "ds4_gguf_dir /tmp/x and ds4_root /opt/ds4",
            "checked_path": "/tmp",
            "free_bytes": 68686774272,
            "reclaimable_bytes": 0,
            "need_bytes": need,
            "shortfall_bytes": 27152062368,
        }
    ]


SPACE_CASES = [
    # id, facts, weights, errors
    ("exactly enough on one filesystem", host(gguf_free=(64 << 20) + 2 * GIB), SMALL_WEIGHTS, []),
    ("a byte short on one filesystem", host(gguf_free=(64 << 20) + 2 * GIB - 1), SMALL_WEIGHTS,
     ["Free space on the filesystem of ds4_gguf_dir /var/lib/ds4/gguf and ds4_root /opt/ds4 (checked at "
      "/var/lib) is 2,214,592,511 bytes (2.06 GiB); wanted 2,214,592,512 bytes (2.06 GiB): 67,108,864 bytes "
      "(0.06 GiB) for the weights (ds4_weights_space_bytes) + 2,147,483,648 bytes (2.00 GiB) for the build "
      "(ds4_build_space_bytes); short by 1 bytes (0.00 GiB); free space there or move ds4_gguf_dir or "
      "ds4_root to a larger filesystem (ds4_force does not skip this check)"]),
    ("weights filesystem full (the sandbox's small_disk)", host(separate=True, gguf_free=16 << 20),
     SMALL_WEIGHTS,
     ["Free space on the filesystem of ds4_gguf_dir /var/lib/ds4/gguf (checked at /var/lib/ds4) is "
      "16,777,216 bytes (0.02 GiB); wanted 67,108,864 bytes (0.06 GiB) for the weights "
      "(ds4_weights_space_bytes); short by 50,331,648 bytes (0.05 GiB); free space there or move "
      "ds4_gguf_dir to a larger filesystem (ds4_force does not skip this check)"]),
    ("install filesystem full", host(separate=True, root_free=GIB), SMALL_WEIGHTS,
     ["Free space on the filesystem of ds4_root /opt/ds4 (checked at /opt) is 1,073,741,824 bytes "
      "(1.00 GiB); wanted 2,147,483,648 bytes (2.00 GiB) for the build (ds4_build_space_bytes); short by "
      "1,073,741,824 bytes (1.00 GiB); free space there or move ds4_root to a larger filesystem (ds4_force "
      "does not skip this check)"]),
    ("old weights to reclaim make room", host(gguf_free=GIB),
     {"bytes": 3 * GIB, "reclaimable_bytes": 4 * GIB, "label": "L"}, []),
    ("old weights to reclaim are not enough", host(gguf_free=GIB),
     {"bytes": 3 * GIB, "reclaimable_bytes": GIB, "label": "L"},
     ["Free space on the filesystem of ds4_gguf_dir /var/lib/ds4/gguf and ds4_root /opt/ds4 (checked at "
      "/var/lib) is 1,073,741,824 bytes (1.00 GiB), plus 1,073,741,824 bytes (1.00 GiB) of the other "
      "generation's weights (ds4_old_weights); wanted 5,368,709,120 bytes (5.00 GiB): 3,221,225,472 bytes "
      "(3.00 GiB) for the weights (L) + 2,147,483,648 bytes (2.00 GiB) for the build "
      "(ds4_build_space_bytes); short by 3,221,225,472 bytes (3.00 GiB); free space there or move "
      "ds4_gguf_dir or ds4_root to a larger filesystem (ds4_force does not skip this check)"]),
]  # fmt: skip


@pytest.mark.parametrize(("facts", "weights", "errors"), [c[1:] for c in SPACE_CASES],
                         ids=[c[0] for c in SPACE_CASES])  # fmt: skip
@pytest.mark.parametrize("force", [False, True], ids=["plain", "forced"])
def test_space_verdicts_are_never_forced(facts, weights, errors, force):
    verdict = judge(facts, settings(weights=weights, force=force))
    assert (verdict["errors"], verdict["warnings"]) == (errors, [])


def test_space_record_per_filesystem():
    verdict = judge(host(separate=True, gguf_free=16 << 20), settings())
    assert verdict["space"] == [
        {"paths": "ds4_gguf_dir /var/lib/ds4/gguf", "checked_path": "/var/lib/ds4", "free_bytes": 16 << 20,
         "reclaimable_bytes": 0, "need_bytes": 64 << 20, "shortfall_bytes": 48 << 20},
        {"paths": "ds4_root /opt/ds4", "checked_path": "/opt", "free_bytes": 3 * TB, "reclaimable_bytes": 0,
         "need_bytes": 2 * GIB, "shortfall_bytes": 0},
    ]  # fmt: skip


def test_all_refusals_at_once():
    facts = host(arch="x86_64", gpu=NO_GPU, cuda=NO_CUDA, separate=True, gguf_free=0)
    verdict = judge(facts, settings(force=True))
    assert [e.split(" is ")[0] for e in verdict["errors"]] == [
        "GPU",
        "CUDA compiler nvcc",
        "Free space on the filesystem of ds4_gguf_dir /var/lib/ds4/gguf (checked at /var/lib/ds4)",
    ]
    assert verdict["warnings"] == [forced(X86_REFUSED)]


REAL_RUN = REPO / "tests" / "unit" / "fixtures" / "h200" / "preflight"


def real_result(name, status):
    """The result the real run printed for localhost (`fatal: [localhost]: FAILED! => {...}`, one line)."""
    prefix = f"{status} => "
    (line,) = [x for x in (REAL_RUN / f"{name}.log").read_text().splitlines() if x.startswith(prefix)]
    return json.loads(line[len(prefix) :])


def real_facts(free_bytes):
    """ds4_host_facts as read on the real H200 (gguf_dir=/tmp/ds4-gguf), with the free space of a given run:
    /tmp moved by a few KiB between runs. The run predates the fact's rename from ds4_host (issue 11)."""
    line = (REAL_RUN / "ds4_host_facts.log").read_text()
    facts = json.loads(line.split(" => ", 1)[1])["ansible_facts"]["ds4_host"]
    for where in ("gguf_dir", "install_root"):
        facts["disk"][where]["free_bytes"] = free_bytes
    return facts


REAL_REFUSALS = {
    # run: (errors, warnings) but for the disk refusal, which ends both runs' errors
    "refused": ([X86_REFUSED, H200_REFUSED], []),
    "forced": ([], [forced(X86_REFUSED), forced(H200_REFUSED)]),
}


@pytest.mark.parametrize("run", REAL_REFUSALS)
def test_the_real_h200_runs_say_what_judge_says(run):
    # ansible-playbook of the role on the real H200, as shipped (aarch64, 12.1, the real catalog sizes):
    # a 64 GiB disk lacks room for the 87 GiB of weights, forced or not.
    printed = real_result(run, "fatal: [localhost]: FAILED!")["preflight"]
    errors, warnings = REAL_REFUSALS[run]
    assert (printed["errors"][:-1], printed["warnings"]) == (errors, warnings)
    assert printed["errors"][-1].startswith(
        "Free space on the filesystem of ds4_gguf_dir /tmp/ds4-gguf and ds4_root /opt/ds4 (checked at /tmp) "
    )
    facts = real_facts(printed["space"][0]["free_bytes"])
    verdict = judge(facts, settings(force=run == "forced", weights=weights_need(_wanted("0731", "dspark"))))
    assert (verdict["errors"], verdict["warnings"]) == (printed["errors"], printed["warnings"])


@pytest.mark.parametrize("run", ["forced_with_room", "check"])
def test_the_real_h200_passes_forced_with_room(run):
    log = (REAL_RUN / f"{run}.log").read_text()
    assert f"[WARNING]: {forced(H200_REFUSED)}" in log
    assert real_result(run, "ok: [localhost]") == {"ds4_build_target": H200_BUILD}
    assert re.search(r"^localhost +: ok=4 +changed=0 +unreachable=0 +failed=0", log, re.MULTILINE)


def _wanted(generation, speculation):
    from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import model_files

    return model_files(CATALOG, generation, speculation)


WEIGHT_CASES = [
    # id, generation, speculation, files in ds4_gguf_dir, in ~/gguf, old_weights, bytes, reclaimable
    ("nothing there", "0731", "dspark", [], [], "auto", SIZE_BASE + SIZE_DRAFTER, 0),
    ("plain needs the base only", "0731", "plain", [], [], "auto", SIZE_BASE, 0),
    ("drafter in place", "0731", "dspark", [(DRAFTER_0731, SIZE_DRAFTER)], [], "auto", SIZE_BASE, 0),
    ("wrong-size drafter is fetched again", "0731", "dspark", [(DRAFTER_0731, 5)], [], "auto",
     SIZE_BASE + SIZE_DRAFTER, 0),
    ("half a base resumes", "0731", "dspark", [(BASE_0731 + ".part", SIZE_BASE // 2)], [], "auto",
     SIZE_BASE - SIZE_BASE // 2 + SIZE_DRAFTER, 0),
    ("a part longer than the file starts over", "0731", "plain", [(BASE_0731 + ".part", SIZE_BASE + 1)], [],
     "auto", SIZE_BASE, 0),
    ("shell installer's finished base is adopted", "0731", "dspark", [], [(BASE_0731, SIZE_BASE)], "auto",
     SIZE_DRAFTER, 0),
    # The plan moves a shorter copy in as the part when it lies on the same filesystem: counted at best.
    ("shell installer's half base is resumed", "0731", "dspark", [], [(BASE_0731, 7)], "auto",
     SIZE_BASE - 7 + SIZE_DRAFTER, 0),
    ("a present file of the wrong size is fetched though ~/gguf has it", "0731", "plain", [(BASE_0731, 5)],
     [(BASE_0731, SIZE_BASE)], "auto", SIZE_BASE, 0),
    ("legacy base of unknown size in place", "legacy", "mtp", [(BASE_LEGACY, 86 * GIB)], [], "auto",
     UNKNOWN_SIZE_BYTES["mtp"], 0),
    ("legacy sizes unknown", "legacy", "mtp", [], [], "auto",
     UNKNOWN_SIZE_BYTES["base"] + UNKNOWN_SIZE_BYTES["mtp"], 0),
    ("old generation reclaimable", "0731", "dspark", [(BASE_LEGACY, 80 * GIB), (MTP_LEGACY + ".part", 9)],
     [], "auto", SIZE_BASE + SIZE_DRAFTER, 80 * GIB + 9),
    ("old generation kept", "0731", "dspark", [(BASE_LEGACY, 80 * GIB)], [], "keep",
     SIZE_BASE + SIZE_DRAFTER, 0),
]  # fmt: skip


@pytest.mark.parametrize(("generation", "speculation", "present", "adoptable", "policy", "need", "reclaim"),
                         [c[1:] for c in WEIGHT_CASES], ids=[c[0] for c in WEIGHT_CASES])  # fmt: skip
def test_weights_need(generation, speculation, present, adoptable, policy, need, reclaim):
    other = [f["name"] for g, spec in CATALOG.items() if g != generation for f in spec["files"].values()]
    result = weights_need(
        _wanted(generation, speculation),
        gguf_files=[{"name": n, "size": s} for n, s in present],
        adoptable=[{"name": n, "size": s} for n, s in adoptable],
        other=other,
        old_weights=policy,
    )
    assert (result["bytes"], result["reclaimable_bytes"]) == (need, reclaim)


def test_weights_need_labels_and_budgets():
    result = weights_need(_wanted("legacy", "dspark"), unknown_size_bytes={"dspark": 5})
    assert result["label"] == (
        "the legacy base + dspark files of ds4_model_catalog not yet in place, unknown sizes from "
        "ds4_weights_unknown_size_bytes"
    )
    assert [(f["role"], f["expected"], f["expected_from"]) for f in result["files"]] == [
        ("base", UNKNOWN_SIZE_BYTES["base"], "ds4_weights_unknown_size_bytes.base"),
        ("dspark", 5, "ds4_weights_unknown_size_bytes.dspark"),
    ]
    with pytest.raises(ValueError, match=r"ds4_old_weights='never' is not one of: keep, remove, auto"):
        weights_need([], old_weights="never")


def check_module(args):
    return run_module(ds4_preflight_check, args)[1]


def test_module_passes_a_spark_and_sets_the_build():
    out = check_module({"host": GB10, "catalog": CATALOG})
    assert not out.get("failed") and out["changed"] is False
    assert out["ansible_facts"] == {"ds4_build_target": SPARK_BUILD}
    assert out["preflight"]["weights"]["bytes"] == SIZE_BASE + SIZE_DRAFTER


def test_module_refuses_with_one_item_per_refusal_and_a_message_of_one_line():
    out = check_module({"host": host(H200_FACTS, cuda=CUDA_12), "catalog": CATALOG})
    assert out["failed"] is True and "ansible_facts" not in out
    errors = out["preflight"]["errors"]
    assert out["msg"] == "; ".join(errors) and "\n" not in out["msg"]
    assert errors[:3] == [X86_REFUSED, H200_REFUSED, CUDA12_REFUSED]
    assert errors[3].startswith("Free space on the filesystem of ds4_gguf_dir /tmp/x")


def test_module_forced_warns():
    args = {"host": H200_FACTS, "force": True, "accepted_archs": ["x86_64"], "weights_space_bytes": 1}
    out = check_module(args)
    assert not out.get("failed")
    # Also passed to module.warn(), which Ansible prints as [WARNING] (the Molecule scenario checks that
    # line); in-process, whether it lands in the result depends on what other tests imported.
    assert out["preflight"]["warnings"] == [forced(H200_REFUSED)]
    assert out["ansible_facts"]["ds4_build_target"] == H200_BUILD


def test_module_names_a_bad_catalog_request():
    out = check_module({"host": GB10, "catalog": CATALOG, "speculation": "mtp"})
    assert out["failed"] is True
    assert "ds4_speculation 'mtp' needs a mtp file" in out["msg"]


# --- the memory a quantization needs (ds4_quantization, ds4_pairs) --------------------------------------

PAIR = {"pair01": {"coordinator": {"host": "spark04", "address": "10.77.0.1"},
                   "worker": {"host": "spark05", "address": "10.77.0.2"}}}  # fmt: skip
SPARK_MEMORY = 128501256192


def test_module_refuses_q4_on_one_spark_naming_the_pair_setting_before_anything():
    args = {"host": GB10, "catalog": CATALOG, "quantization": "q4", "name": "spark01",
            "memory_bytes": SPARK_MEMORY}  # fmt: skip
    out = check_module(args)
    assert out["failed"] is True
    (memory,) = [e for e in out["preflight"]["errors"] if e.startswith("ds4_quantization")]
    assert "one Spark cannot hold it; declare spark01 in a pair (ds4_pairs)" in memory


def test_module_accepts_q4_on_each_member_of_a_pair():
    for name in ("spark04", "spark05"):
        args = {"host": GB10, "catalog": CATALOG, "quantization": "q4", "name": name,
                "memory_bytes": SPARK_MEMORY, "pairs": PAIR, "weights_space_bytes": 1}  # fmt: skip
        out = check_module(args)
        assert not out.get("failed"), out["msg"]


def test_module_takes_the_memory_from_the_facts_without_the_setting():
    facts = copy.deepcopy(GB10)
    facts["gpu"]["memory_bytes"] = 64 * 1024**3
    out = check_module({"host": facts, "catalog": CATALOG, "name": "spark01", "weights_space_bytes": 1})
    assert out["failed"] is True and out["msg"].startswith("ds4_quantization 'q2' needs")


# --- a streamed family (issue 53): its resident part and cache in memory, its file on a local disk -------

NFS_MOUNT = {"mount_point": "/var/lib/ds4/gguf", "fstype": "nfs4", "source": "nas:/export/gguf"}
LOCAL_MOUNT = {"mount_point": "/var/lib", "fstype": "xfs", "source": "/dev/nvme1n1p1"}


def streamed_host(mount):
    facts = copy.deepcopy(GB10)
    facts["disk"]["gguf_dir"]["mount"] = mount
    return facts


def test_module_fits_a_streamed_family_by_its_resident_part_not_its_whole_file():
    # V4.1's 341 GiB file on one 128 GB Spark: streamed, its resident part and cache fit.
    args = {"host": streamed_host(LOCAL_MOUNT), "catalog": CATALOG, "generation": "v4.1",
            "speculation": "plain", "name": "spark01", "memory_bytes": SPARK_MEMORY}  # fmt: skip
    out = check_module(args)
    assert not out.get("failed"), out["msg"]


def test_module_refuses_a_streamed_family_on_a_network_mount_before_anything():
    args = {"host": streamed_host(NFS_MOUNT), "catalog": CATALOG, "generation": "qwen3.8",
            "speculation": "plain", "name": "spark01", "memory_bytes": SPARK_MEMORY}  # fmt: skip
    out = check_module(args)
    assert out["failed"] is True
    (refused,) = [e for e in out["preflight"]["errors"] if e.startswith("ds4_model_family")]
    assert "ds4_gguf_dir /var/lib/ds4/gguf is on a network filesystem (nfs4" in refused
