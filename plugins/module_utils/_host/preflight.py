"""Whether a host can take the ds4 engine, decided before anything on it changes.

Pure functions over the ds4_host_facts fact (module_utils/_host/facts.py) and the role's settings:

- weights_need() estimates the bytes the weights still need on ds4_gguf_dir's filesystem from the
  catalog's expected sizes. The weights role makes the exact plan later (module_utils/_weights/disk_plan.py);
  this estimate takes that plan's accounting (placement, other_on_disk) and never refuses a host the plan
  could serve: it counts files already in place, partial downloads, a shell installer's download it can
  adopt, and the other generation's files that ds4_old_weights allows removing.
- judge() returns the refusals, the warnings and the engine build for the GPU.

Every message names the fact, the value seen, the value wanted and the variable that changes it.
ds4_force turns a mismatched CPU architecture, GPU or CUDA version into a warning, never a lack of space,
a missing compiler or a build that cannot be named.
"""

from __future__ import annotations

import re

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import describe_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cuda_arch import cuda_build_target
from ansible_collections.ds4.fleet.plugins.module_utils._weights.disk_plan import (
    check_policy,
    other_on_disk,
    placement,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import part_name

FORCE_VAR = "ds4_force"
FORCED = f"going on because {FORCE_VAR} is true"
NOT_FORCEABLE = f"({FORCE_VAR} does not skip this check)"
# The installer's own budgets for a missing base and drafter (engine-contract.md); the legacy MTP head is
# about 3.6 GiB.
UNKNOWN_SIZE_BYTES = {"base": 94489280512, "dspark": 8589934592, "mtp": 4294967296}
_CAP = re.compile(r"\d{1,2}\.\d")


def weights_need(
    wanted,
    gguf_files=(),
    adoptable=(),
    other=(),
    old_weights="auto",
    unknown_size_bytes=None,
):
    """Bytes the wanted weights still need on ds4_gguf_dir's filesystem.

    wanted       catalog entries in launcher order (ds4.fleet.model_files): name, role, generation, size
                 (None when the catalog does not know it)
    gguf_files   [{"name", "size"}] in ds4_gguf_dir: `<name>` is a finished file (the fetch renames a
                 file into place only once verified), `<name>.part` an interrupted download it resumes
    adoptable    [{"name", "size"}]: a shell installer's ~/gguf; a file of the expected size is adopted
                 (moved, or used in place) instead of fetched
    other        names of the other generation's files; counted as reclaimable unless ds4_old_weights
                 is keep
    unknown_size_bytes  {role: bytes} to budget where the catalog's size is null
    Returns {"bytes", "reclaimable_bytes", "files": [{"name", "role", "expected", "expected_from",
    "have", "need"}], "label"}.
    """
    check_policy(old_weights)
    budget = dict(UNKNOWN_SIZE_BYTES, **(unknown_size_bytes or {}))
    on_disk = {f["name"]: f["size"] for f in gguf_files}
    found = {f["name"]: f["size"] for f in adoptable}
    files = [_file_need(entry, budget, on_disk, found) for entry in wanted]
    reclaimable = 0
    if old_weights != "keep":
        complete = {n: on_disk[n] for n in other if n in on_disk}
        partial = {n: on_disk[part_name(n)] for n in other if part_name(n) in on_disk}
        reclaimable = sum(other_on_disk(other, complete, partial).values())
    generations = sorted({str(entry["generation"]) for entry in wanted})
    roles = " + ".join(entry["role"] for entry in wanted)
    label = f"the {'/'.join(generations)} {roles} files of ds4_model_catalog not yet in place"
    if any(f["expected_from"] != "ds4_model_catalog" for f in files):
        label += ", unknown sizes from ds4_weights_unknown_size_bytes"
    return {
        "bytes": sum(f["need"] for f in files),
        "reclaimable_bytes": reclaimable,
        "files": files,
        "label": label,
    }


def _file_need(entry, budget, on_disk, found):
    """One wanted file's expected size, where that came from, and the bytes it still needs."""
    name, role, size = entry["name"], entry["role"], entry.get("size")
    if size is None:
        if role not in budget:
            raise ValueError(
                f"ds4_model_catalog has no size for {name} and ds4_weights_unknown_size_bytes has no "
                f"{role!r} entry; wanted a byte count for it (ds4_weights_unknown_size_bytes.{role})"
            )
        expected, expected_from = budget[role], f"ds4_weights_unknown_size_bytes.{role}"
    else:
        expected, expected_from = size, "ds4_model_catalog"
    if size is None and (name in on_disk or name in found):
        # In place, or adoptable; an unknown size is the hub's to judge, later, by the weights role.
        have = expected
    else:
        # The shell installer's copy may lie on another filesystem or this one: count it as the plan
        # would at best, so that the estimate never refuses a host the plan could serve.
        _how, have = placement(expected, on_disk.get(name), on_disk.get(part_name(name), 0), found.get(name))
    return {
        "name": name,
        "role": role,
        "expected": expected,
        "expected_from": expected_from,
        "have": have,
        "need": expected - have,
    }


def _cap_text(value):
    """An accepted compute capability as written in YAML (12.1, "12.1", 9) -> '12.1'; None if not one."""
    if isinstance(value, bool):
        return None
    text = f"{value}.0" if isinstance(value, int) else str(value).strip()
    return text if _CAP.fullmatch(text) else None


class _Verdict:
    def __init__(self, force):
        self.force = force
        self.errors = []
        self.warnings = []

    def refuse(self, fact, remedy, forceable=True):
        """FACT names what was seen and wanted; with ds4_force a forceable refusal becomes a warning."""
        if self.force and forceable:
            self.warnings.append(f"{fact}; {FORCED}")
        else:
            self.errors.append(f"{fact}; {remedy}")


def _check_arch(verdict, host, accepted):
    arch = host.get("arch")
    if arch not in accepted:
        verdict.refuse(
            f"CPU architecture is {arch}; wanted one of {', '.join(accepted) or 'none'} (ds4_accepted_archs)",
            f"set {FORCE_VAR}: true to build for it anyway",
        )


def _check_gpu(verdict, gpu, accepted_caps, cuda_arch):
    """Refuse a missing or unaccepted GPU; return its compute capability (None when unknown)."""
    wanted = f"one of {', '.join(accepted_caps) or 'none'} (ds4_accepted_compute_caps)"
    if not gpu.get("present"):
        verdict.refuse(
            f"GPU is absent ({gpu.get('error') or 'nvidia-smi listed none'}); wanted an NVIDIA GPU, "
            f"compute capability {wanted}",
            f"install the NVIDIA driver, or set {FORCE_VAR}: true and ds4_cuda_arch to build without one",
            forceable=bool(cuda_arch),
        )
        return None
    cap = gpu.get("compute_cap")
    if cap is None:
        verdict.refuse(
            f"GPU compute capability is not reported ({gpu.get('name')}); wanted {wanted}",
            f"set {FORCE_VAR}: true and ds4_cuda_arch to build for it anyway",
            forceable=bool(cuda_arch),
        )
    elif cap not in accepted_caps:
        verdict.refuse(
            f"GPU compute capability is {cap} ({gpu.get('name')}); wanted {wanted}",
            f"set {FORCE_VAR}: true to build for it anyway",
        )
    return cap


def _check_cuda(verdict, cuda, cuda_major, cuda_home):
    nvcc = cuda.get("nvcc_path")
    if not nvcc:
        verdict.refuse(
            f"CUDA compiler nvcc is absent (not in {cuda_home}/bin nor on PATH); wanted nvcc of CUDA "
            f"{cuda_major}.x (ds4_cuda_major)",
            f"install the CUDA {cuda_major} toolkit, or set ds4_cuda_home to the folder it is in "
            f"{NOT_FORCEABLE}",
            forceable=False,
        )
    elif cuda.get("major") != cuda_major:
        seen = cuda.get("version") or f"unknown ({nvcc} --version printed none)"
        where = f" ({nvcc})" if cuda.get("version") else ""
        verdict.refuse(
            f"CUDA version is {seen}{where}; wanted {cuda_major}.x (ds4_cuda_major)",
            f"set {FORCE_VAR}: true to build with it anyway",
        )


def _build_target(verdict, cap, cuda_arch):
    if cuda_arch:
        try:
            target = cuda_build_target(None, cuda_arch)
        except ValueError:
            verdict.errors.append(
                f"CUDA arch override is {cuda_arch!r}; wanted the form sm_NN or sm_NNN such as sm_121 "
                "(ds4_cuda_arch); correct it, or leave it empty to build for the GPU found"
            )
            return None
        if cap is not None:
            natural = cuda_build_target(cap)["arch"]
            if natural != target["arch"]:
                verdict.warnings.append(
                    f"CUDA arch is {target['arch']} (ds4_cuda_arch) but the GPU's compute capability {cap} "
                    f"builds for {natural}; building for {target['arch']} as ds4_cuda_arch says"
                )
        return target
    return cuda_build_target(cap) if cap is not None else None


def _check_space(verdict, disk, weights, build_bytes):
    """One check per filesystem: the weights on ds4_gguf_dir's, the build on ds4_root's, summed when
    both are one filesystem. Returns what was checked, for the record."""
    gguf, root = disk["gguf_dir"], disk["install_root"]
    weights_part = (weights["bytes"], f"for the weights ({weights['label']})")
    build_part = (build_bytes, "for the build (ds4_build_space_bytes)")
    if disk.get("same_filesystem"):
        checks = [
            (
                f"ds4_gguf_dir {gguf['path']} and ds4_root {root['path']}",
                "move ds4_gguf_dir or ds4_root",
                gguf,
                [weights_part, build_part],
                weights["reclaimable_bytes"],
            )
        ]
    else:
        checks = [
            (f"ds4_gguf_dir {gguf['path']}", "move ds4_gguf_dir", gguf, [weights_part],
             weights["reclaimable_bytes"]),
            (f"ds4_root {root['path']}", "move ds4_root", root, [build_part], 0),
        ]  # fmt: skip
    space = []
    for what, move, fs, parts, reclaimable in checks:
        need = sum(count for count, _part in parts)
        free = fs["free_bytes"]
        record = {
            "paths": what,
            "checked_path": fs["checked_path"],
            "free_bytes": free,
            "reclaimable_bytes": reclaimable,
            "need_bytes": need,
            "shortfall_bytes": max(0, need - free - reclaimable),
        }
        space.append(record)
        if not record["shortfall_bytes"]:
            continue
        seen = describe_bytes(free)
        if reclaimable:
            seen += f", plus {describe_bytes(reclaimable)} of the other generation's weights"
            seen += " (ds4_old_weights)"
        if len(parts) == 1:
            wanted = f"{describe_bytes(need)} {parts[0][1]}"
        else:
            wanted = f"{describe_bytes(need)}: " + " + ".join(f"{describe_bytes(n)} {w}" for n, w in parts)
        verdict.refuse(
            f"Free space on the filesystem of {what} (checked at {fs['checked_path']}) is {seen}; "
            f"wanted {wanted}; short by {describe_bytes(record['shortfall_bytes'])}",
            f"free space there or {move} to a larger filesystem {NOT_FORCEABLE}",
            forceable=False,
        )
    return space


def judge(host, settings):
    """The preflight's verdict on one host.

    host      the ds4_host_facts fact
    settings  accepted_archs, accepted_compute_caps, cuda_major (int), force (bool), cuda_arch (str or
              empty), cuda_home, weights ({"bytes", "reclaimable_bytes", "label"}: weights_need() or an
              override), build_bytes
    Returns {"errors": [str], "warnings": [str], "build_target": {...} or None, "space": [{...}]}.
    Errors in the settings themselves are refusals too, naming the variable.
    """
    verdict = _Verdict(bool(settings.get("force")))
    caps = []
    for value in settings.get("accepted_compute_caps") or []:
        cap = _cap_text(value)
        if cap is None:
            verdict.errors.append(
                f"An accepted compute capability is {value!r}; wanted MAJOR.MINOR such as '12.1' "
                "(ds4_accepted_compute_caps); correct the list"
            )
        else:
            caps.append(cap)
    archs = [str(arch) for arch in settings.get("accepted_archs") or []]
    cuda_arch = (settings.get("cuda_arch") or "").strip() or None

    _check_arch(verdict, host, archs)
    cap = _check_gpu(verdict, host.get("gpu") or {}, caps, cuda_arch)
    _check_cuda(verdict, host.get("cuda") or {}, settings["cuda_major"], settings.get("cuda_home"))
    build_target = _build_target(verdict, cap, cuda_arch)
    space = _check_space(verdict, host["disk"], settings["weights"], settings["build_bytes"])
    return {
        "errors": verdict.errors,
        "warnings": verdict.warnings,
        "build_target": build_target,
        "space": space,
    }
