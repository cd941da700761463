"""Which make target builds a release for its GPU, decided from the release's own Makefile (read, never run).

A GB10 (sm_121) is built as the engine's authors build it, with `make cuda-spark`: from fork v0.5.5 on that
target compiles the Spark weight-read cache (the whole model copied into device memory at start-up), which
a generic `make cuda CUDA_ARCH=sm_121` lacks. But `cuda-spark` has not always built native GB10 code: at
upstream 8d57664 it passes an EMPTY arch (`$(MAKE) … CUDA_ARCH=`), so nvcc builds for its own default
(sm_75) and a GB10 runs JIT-compiled PTX. So the release's Makefile, at the commit its tag resolved to, is
read first:

- `cuda-spark` names a GB10 arch (sm_121, sm_121a), or is an alias of a target that builds `native` on a
  host whose GPU is the GB10 (the October 2026 fork tree: `cuda-spark` -> `cuda-generic`, CUDA_ARCH=native):
  `make cuda-spark`.
- `cuda-spark` passes an empty arch, names another arch, builds `native` for another GPU, cannot be read, or
  is missing: `make cuda CUDA_ARCH=sm_121`, the fallback, said with its reason wherever the build shows.

Other arches keep `make cuda CUDA_ARCH=sm_NNN`. An operator may name the target for an arch
(ds4_engine_make_targets); a target the Makefile lacks is refused before anything changes. The built
programs' native code stays the judge after the build (module_utils/_engine/cubin.py): a `cuda-spark` build
without GB10 code is refused.

The Makefile is read as text: its rules, their recipes and prerequisites, target-specific and plain
variable assignments; conditionals are not evaluated (every branch is read), which is enough for the
engine's Makefiles, and where it is not the fallback is the safe answer.
"""

from __future__ import annotations

import re

from ansible_collections.ds4.fleet.plugins.module_utils._engine.cubin import is_native_for

SPARK_TARGET = "cuda-spark"
GENERIC_TARGET = "cuda"
NATIVE_TARGET = "cuda-generic"
# The targets an operator may name for an arch (ds4_engine_make_targets).
TARGETS = (SPARK_TARGET, GENERIC_TARGET, NATIVE_TARGET)
GB10_ARCH = "sm_121"
SETTING = "ds4_engine_make_targets"

_ASSIGN = re.compile(r"^(?:(?:override|export)\s+)*([A-Za-z_][A-Za-z0-9_.-]*)\s*(\?|:{1,3}|\+|!)?=\s*(.*)$")
_RULE = re.compile(r"^([^:=#\t][^:=#]*?)\s*(::?)(?!=)\s*(.*)$")
# A command-line assignment in a recipe (`$(MAKE) ds4 CUDA_ARCH=sm_121a`): no space around its `=`.
_CUDA_ARCH = re.compile(r"""\bCUDA_ARCH:?=(?:"([^"]*)"|'([^']*)'|([^\s;|&)]*))""")
# A recipe line that only prints (a usage hint naming CUDA_ARCH=sm_120 builds nothing).
_PRINTS = re.compile(r"^[@+-]*\s*(echo|printf)\b")
_SUB_MAKE = re.compile(r"\$[({]MAKE[)}]\s+(.*)")
_REFERENCE = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_.-]*)[)}]")
_ARCH = re.compile(r"(?:sm|compute)_(\d{2,3}[af]?)")
_DEPTH = 8


class MakeTargetError(ValueError):
    """A target an operator named that cannot be used; the message names the setting."""


def parse_makefile(text):
    """{'rules': {target: {'prereqs': [...], 'recipe': [...], 'vars': {...}}}, 'vars': {name: value}}."""
    rules, variables = {}, {}
    current = []
    lines = re.sub(r"\\\n[ \t]*", " ", text or "").splitlines()
    for line in lines:
        if line.startswith("\t"):
            for target in current:
                rules[target]["recipe"].append(line.strip())
            continue
        stripped = line.split("#", 1)[0].strip()
        if not stripped:
            continue
        if re.match(r"(ifn?eq|ifn?def|else|endif|include|-include|define|endef)\b", stripped):
            current = [] if not stripped.startswith(("else", "endif")) else current
            continue
        assign = _ASSIGN.match(stripped)
        rule = _RULE.match(stripped)
        if assign and not (rule and len(rule.group(1)) < len(assign.group(1))):
            name, kind, value = assign.groups()
            variables[name] = (
                (variables.get(name, "") + " " + value).strip() if kind == "+" else value.strip()
            )
            current = []
            continue
        if not rule:
            current = []
            continue
        targets, _colon, rest = rule.groups()
        current = [t for t in targets.split() if not t.startswith(".")]
        rest = rest.split(";", 1)[0]
        for target in current:
            entry = rules.setdefault(target, {"prereqs": [], "recipe": [], "vars": {}})
            target_assign = _ASSIGN.match(rest.strip())
            if target_assign:
                entry["vars"][target_assign.group(1)] = target_assign.group(3).strip()
            else:
                entry["prereqs"] += rest.split()
        if rest and _ASSIGN.match(rest.strip()):
            current = []
    return {"rules": rules, "vars": variables}


def _expand(value, variables, depth=0):
    if depth > _DEPTH:
        return value
    return _REFERENCE.sub(lambda m: _expand(variables.get(m.group(1), ""), variables, depth + 1), value)


def _arch_of(makefile, target, depth=0):
    """What TARGET passes as CUDA_ARCH: ('arch', value) with value expanded ('' for empty, 'native',
    'sm_121a', '$(CUDA_ARCH)' for whatever the command line gives), via its own recipe or target-specific
    variable, else through the targets it calls or depends on; None when nothing says."""
    rule = makefile["rules"].get(target)
    if rule is None or depth > _DEPTH:
        return None
    variables = makefile["vars"]
    if "CUDA_ARCH" in rule["vars"]:
        return _expand(rule["vars"]["CUDA_ARCH"], variables).strip(), [target]
    called = []
    for line in rule["recipe"]:
        if _PRINTS.match(line):
            continue
        found = _CUDA_ARCH.search(_expand(line, variables))
        if found:
            return next(g for g in found.groups() if g is not None).strip(), [target]
        sub = _SUB_MAKE.search(line)
        if sub:
            called += [word for word in sub.group(1).split() if not word.startswith("-") and "=" not in word]
    for other in called + rule["prereqs"]:
        if other in makefile["rules"] and other != target:
            found = _arch_of(makefile, other, depth + 1)
            if found is not None:
                return found[0], [target, *found[1]]
    return None


def targets_of(text):
    """The names of the rules TEXT defines."""
    return sorted(parse_makefile(text)["rules"])


def is_gb10(arch):
    return is_native_for(arch, GB10_ARCH)


def build_for(target, arch):
    """The build target of the modules: {'arch', 'make_target', 'make_args'}."""
    args = [f"CUDA_ARCH={arch}"] if target == GENERIC_TARGET else []
    return {"arch": arch, "make_target": target, "make_args": args}


def spark_verdict(text, gpu_arch=None):
    """(uses the Spark target, why): whether TEXT's cuda-spark builds native GB10 code, in words."""
    if text is None:
        return False, "the release has no Makefile at its top"
    makefile = parse_makefile(text)
    if SPARK_TARGET not in makefile["rules"]:
        return False, f"its Makefile has no {SPARK_TARGET} target"
    found = _arch_of(makefile, SPARK_TARGET)
    if found is None:
        return False, f"its Makefile's {SPARK_TARGET} does not say which CUDA_ARCH it builds for"
    value, chain = found
    via = f" (through {' -> '.join(chain[1:])})" if len(chain) > 1 else ""
    if not value:
        return False, (
            f"its Makefile's {SPARK_TARGET}{via} passes an empty CUDA_ARCH: nvcc would build for its own "
            "default arch, with no native GB10 code"
        )
    if value == "native":
        if gpu_arch is not None and is_gb10(gpu_arch):
            return True, (
                f"its Makefile's {SPARK_TARGET} is an alias of {chain[-1]}, which builds for the GPU present "
                "(native), a GB10"
            )
        present = f"a {gpu_arch} GPU" if gpu_arch else "no GPU"
        return False, (
            f"its Makefile's {SPARK_TARGET}{via} builds for the GPU present (native), and this host has "
            f"{present}, not a GB10"
        )
    archs = [f"sm_{m}" for m in _ARCH.findall(value)]
    if any(is_gb10(arch) for arch in archs):
        return True, f"its Makefile's {SPARK_TARGET}{via} builds for {value}, the GB10's"
    return (
        False,
        f"its Makefile's {SPARK_TARGET}{via} builds for {value or 'an unknown arch'}, not for the GB10",
    )


def choose(base, makefile_text, chosen=None, gpu_arch=None):
    """The build of a release for BASE's arch (BASE as ds4_cuda_arch.cuda_build_target gives it), from its
    Makefile's text (None when it has none); CHOSEN is the target the operator named for that arch, or None;
    GPU_ARCH the arch of the GPU on the building host, or None.

    Returns {'build_target', 'reason' (one line), 'without_spark_target' (a GB10 built another way)}.
    Raises MakeTargetError for a CHOSEN target that is unknown or that the Makefile lacks.
    """
    arch = base["arch"]
    gb10 = is_gb10(arch)
    if chosen not in (None, ""):
        if chosen not in TARGETS:
            raise MakeTargetError(
                f"{SETTING} names {chosen!r} for {arch}, which is not a target the role builds with: "
                f"one of {', '.join(TARGETS)}"
            )
        if chosen not in targets_of(makefile_text):
            raise MakeTargetError(
                f"{SETTING} names {chosen} for {arch}, but the release's Makefile has no {chosen} target: "
                "name another, or remove the entry to let the Makefile decide"
            )
        reason = f"{SETTING} names {chosen} for {arch}"
        return {
            "build_target": build_for(chosen, arch),
            "reason": reason,
            "without_spark_target": gb10 and chosen != SPARK_TARGET,
        }
    if not gb10:
        return {
            "build_target": build_for(GENERIC_TARGET, arch),
            "reason": f"{arch} is not a GB10: the generic CUDA target for its arch",
            "without_spark_target": False,
        }
    spark, why = spark_verdict(makefile_text, gpu_arch)
    if spark:
        return {
            "build_target": build_for(SPARK_TARGET, arch),
            "reason": f"the Spark target: {why}",
            "without_spark_target": False,
        }
    return {
        "build_target": build_for(GENERIC_TARGET, arch),
        "reason": (
            f"built without the Spark target, with make {GENERIC_TARGET} CUDA_ARCH={arch}, because {why}; on "
            f"a release that has the Spark weight-read cache this build lacks it (set {SETTING} to choose)"
        ),
        "without_spark_target": True,
    }


def without_spark_target(stamp):
    """The reason a build stamp's GB10 build lacks the Spark target, or None: a stamp of another arch, one
    built with cuda-spark, or none at all. A stamp from before the role read Makefiles has no reason."""
    if not isinstance(stamp, dict) or not isinstance(stamp.get("build_target"), dict):
        return None
    built = stamp["build_target"]
    arch, target = str(built.get("arch") or ""), built.get("make_target")
    if not is_gb10(arch) or target == SPARK_TARGET:
        return None
    line = " ".join([str(target), *[str(arg) for arg in built.get("make_args") or []]])
    why = (
        stamp.get("make_target_reason")
        or "built before the role chose the target from the release's Makefile"
    )
    return f"built without the Spark target (make {line}): {why}"
