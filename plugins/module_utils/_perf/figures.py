"""Is this Spark as fast as the engine's authors say it should be? Measured against the published figures
(_weights.catalog.reference_figures), with what the GPU and the host say when it is not.

Measurement (`measure_figures`): the reference workloads over the engine's HTTP API, each timed as the
speed gate times one (ds4_perf.stream_once, run_figures; a nonce in every prompt, the best run counts):
a 2k prompt (prefill at 2k, and the decode after it), a 12k prompt (prefill at 12k), and 12 requests at
once (the aggregate: every token they generated over the wall time from the first sent to the last done).
The decode is held to DSpark's figure when the Spark is configured for DSpark, to the plain one otherwise.

State (`gpu_state`, `memory_state`, `speculation_running`, `native_archs`): pure readers of what
nvidia-smi, /proc/meminfo, the engine's command line and environment (`unit_environment` where root may
not read it) and the release's build stamp say.

Judgement (`judge`): each figure's ratio to its reference (scaled by `scale`, 1 on a GB10), a verdict
against `min_ratio`, and for a slow Spark the causes found in that state, most likely first (`CAUSES`).
`report_lines` is what an operator reads.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._engine.cubin import is_native_for
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cuda_arch import arch_for_compute_cap
from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import without_spark_target
from ansible_collections.ds4.fleet.plugins.module_utils._perf.gate import (
    build_prompt,
    run_figures,
    stream_once,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import DEFAULT_FAMILY, FIGURES

FORMAT = 1
OK, SLOW, UNKNOWN = "ok", "slow", "unknown"

# What each figure is, for the operator.
LABELS = {
    "prefill_2k": "prefill @2k",
    "prefill_12k": "prefill @12k",
    "decode_2k": "plain decode @2k",
    "dspark_decode": "DSpark decode @2k",
    "aggregate_12": "aggregate @12 concurrent",
}
# The figures a decode measured on this Spark is held to, by the speculation it is configured for.
DECODE_FIGURE = {"dspark": "dspark_decode", "plain": "decode_2k"}

# The causes, most likely first when several are found: a cause that slows every figure for certain ranks
# above one that may. Each names the figures it can slow ("all" or a list).
CAUSES = (
    "build-without-native-arch",
    "build-without-spark-target",
    "gpu-throttled",
    "speculation-off",
    "other-gpu-processes",
    "memory-pressure",
    "clocks-low",
    "other-requests",
    "persistence-off",
)

# Memory pressure on the unified memory that holds the mmap'd weights: swap in use beyond this, or less
# than this share of the memory available.
SWAP_USED_BYTES = 1 << 30
AVAILABLE_SHARE = 0.05
# A busy GPU below this share of its top SM clock, with no reason reported, is noted.
LOW_CLOCK_SHARE = 0.7


class VerifyError(ValueError):
    """A setting or a reading verify cannot use; the message names it."""


def check_ratio(value: Any, name: str = "ds4_verify_min_ratio") -> float:
    """A ratio above 0 (and at most 1 for the minimum)."""
    if isinstance(value, bool):
        raise VerifyError(f"{name} is a number above 0 and at most 1: {value!r}")
    try:
        ratio = float(value)
    except (TypeError, ValueError) as exc:
        raise VerifyError(f"{name} is a number above 0 and at most 1: {value!r}") from exc
    if not 0 < ratio <= 1:
        raise VerifyError(f"{name} is a number above 0 and at most 1: {value!r}")
    return ratio


def check_scale(value: Any) -> float:
    """The factor the published figures are multiplied by: a number above 0."""
    try:
        factor = float(value) if not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        factor = 0.0
    if not factor > 0:
        raise VerifyError(f"ds4_verify_reference_scale is a number above 0: {value!r}")
    return factor


# --- measurement -------------------------------------------------------------------------------------


def _best(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return max(values) if values else None


def measure_figures(
    base_url: str,
    *,
    decode_tokens: int,
    concurrent: int,
    runs: int,
    timeout: float,
    stream: Any = stream_once,
    clock: Any = time.monotonic,
    pair: bool = False,
) -> dict:
    """The workloads, `runs` times each (the best counts): {figure: tok/s or None}, the runs, problems.

    `pair`: two Sparks as a pair, published at 2k alone: only the 2k prompt is sent (at a pair's ~122
    tok/s prefill the 12k prompt and the 12 at once would take minutes for no published figure)."""
    single: dict[str, list[dict]] = {"2k": [], "12k": []}
    sizes = (("2k", 2048),) if pair else (("2k", 2048), ("12k", 12288))
    for _run in range(runs):
        for size, tokens in sizes:
            prompt = build_prompt(tokens, decode_tokens if size == "2k" else 8, uuid.uuid4().hex[:12])
            single[size].append(
                run_figures(stream(base_url, prompt, decode_tokens if size == "2k" else 8, timeout))
            )
    aggregates = (
        []
        if pair
        else [_aggregate(base_url, decode_tokens, concurrent, timeout, stream, clock) for _run in range(runs)]
    )
    problems = sorted({p for size in single.values() for run in size for p in run["problems"]})
    problems += sorted({p for run in aggregates for p in run["problems"]})
    return {
        "prefill_2k": _best(single["2k"], "prefill_tps"),
        "prefill_12k": _best(single["12k"], "prefill_tps"),
        "decode": _best(single["2k"], "decode_tps"),
        "aggregate_12": _best(aggregates, "tps"),
        "concurrent": concurrent,
        "runs": runs,
        "problems": problems,
    }


def _aggregate(
    base_url: str, decode_tokens: int, concurrent: int, timeout: float, stream: Any, clock: Any
) -> dict:
    """`concurrent` streams at once: every token they generated over the wall time of them all."""
    results: list[Any] = [None] * concurrent

    def one(index: int) -> None:
        prompt = build_prompt(64, decode_tokens, uuid.uuid4().hex[:12])
        try:
            results[index] = run_figures(stream(base_url, prompt, decode_tokens, timeout))
        except Exception as exc:  # noqa: BLE001 - a failed stream is reported, not raised from a thread
            results[index] = exc

    started = clock()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(concurrent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = clock() - started
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        return {
            "tps": None,
            "problems": [f"{len(failed)} of {concurrent} concurrent requests failed: {failed[0]}"],
        }
    tokens = sum(r["completion_tokens"] or 0 for r in results)
    return {"tps": round(tokens / wall, 1) if wall > 0 and tokens else None, "problems": []}


# --- state --------------------------------------------------------------------------------------------

GPU_STATE_FIELDS = ("index", "compute_cap", "persistence_mode")
APPS_FIELDS = ("pid", "process_name", "used_memory")


def gpu_state_command() -> list[str]:
    return ["nvidia-smi", "--query-gpu=" + ",".join(GPU_STATE_FIELDS), "--format=csv,noheader,nounits"]


def gpu_apps_command() -> list[str]:
    return ["nvidia-smi", "--query-compute-apps=" + ",".join(APPS_FIELDS), "--format=csv,noheader,nounits"]


def parse_gpu_state(text: str) -> dict:
    """GPU 0's compute capability, arch and persistence mode (True, False or None when not reported)."""
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == len(GPU_STATE_FIELDS) and fields[0].isdigit():
            try:
                arch = arch_for_compute_cap(fields[1])
            except ValueError:
                arch = None
            persistence = {"enabled": True, "disabled": False}.get(fields[2].lower())
            return {"compute_cap": fields[1], "arch": arch, "persistence": persistence}
    return {"compute_cap": None, "arch": None, "persistence": None}


def parse_gpu_apps(text: str) -> list[dict]:
    """The processes on the GPU: [{pid, name, used_mib}]."""
    apps = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == len(APPS_FIELDS) and fields[0].isdigit():
            used = fields[2]
            apps.append(
                {"pid": int(fields[0]), "name": fields[1], "used_mib": int(used) if used.isdigit() else None}
            )
    return apps


def memory_state(meminfo: str) -> dict:
    """MemTotal, MemAvailable and the swap in use from /proc/meminfo, in bytes (None when absent)."""
    values = {}
    for key in ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree"):
        match = re.search(rf"^{key}:\s+(\d+) kB$", meminfo, re.MULTILINE)
        values[key] = int(match.group(1)) * 1024 if match else None
    swap_used = (
        None
        if values["SwapTotal"] is None or values["SwapFree"] is None
        else values["SwapTotal"] - values["SwapFree"]
    )
    return {"total": values["MemTotal"], "available": values["MemAvailable"], "swap_used": swap_used}


def speculation_running(argv: list[str], env: dict) -> str:
    """What the running engine speculates with, from its command line and environment as the engine
    contract reads them: --no-spec is plain; --dspark FILE, or DS4_CONT_DSPARK with DS4_DSPARK_MODEL (unless
    --no-dspark), is dspark; --mtp FILE (unless --no-mtp) is mtp; otherwise plain."""
    args = list(argv)
    if "--no-spec" in args:
        return "plain"

    def value(flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None

    if "--no-dspark" not in args:
        flag = str(env.get("DS4_CONT_DSPARK", "")).strip()
        if value("--dspark") or (flag not in ("", "0") and env.get("DS4_DSPARK_MODEL")):
            return "dspark"
    if "--no-mtp" not in args and value("--mtp"):
        return "mtp"
    return "plain"


def env_file_values(text: str) -> dict[str, str]:
    """The variables of an EnvironmentFile= as systemd reads the ones _service.launch.env_file_line writes:
    `NAME=value`, the value bare, or double-quoted with \\ escapes, or single-quoted as it stands; blank
    lines and lines starting with # or ; are comments."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        name, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        values[name] = value
    return values


def unit_environment(show: str, read: Callable[[str], str | None]) -> dict[str, str]:
    """The environment a unit gives its process, from `systemctl show -p Environment -p EnvironmentFiles`:
    each file's variables (READ(path) gives its text, None when unreadable), then Environment='s on top.
    What the engine was started with when its own environment cannot be read (reading another user's
    /proc/PID/environ needs CAP_SYS_PTRACE, which root lacks in a container); it is the unit's setting now,
    which a change not yet restarted into may have moved on from."""
    env: dict[str, str] = {}
    inline: dict[str, str] = {}
    for line in show.splitlines():
        key, _eq, value = line.partition("=")
        if key == "EnvironmentFiles" and value:
            text = read(value.split(" (ignore_errors=")[0].strip())
            env.update(env_file_values(text or ""))
        elif key == "Environment" and value:
            inline.update(env_file_values("\n".join(shlex.split(value))))
    return {**env, **inline}


def build_of(stamp: dict | None) -> dict | None:
    """How the running release was built, by its build stamp: its build target and why; None unstamped."""
    if not isinstance(stamp, dict):
        return None
    return {key: stamp.get(key) for key in ("build_target", "make_target_reason")}


def native_archs(stamp: dict | None) -> list[str] | None:
    """The archs of native GPU code (SASS) ds4-server carries, by its build stamp; None when unstamped."""
    if not isinstance(stamp, dict) or not isinstance(stamp.get("sass_archs"), dict):
        return None
    archs = stamp["sass_archs"].get("ds4-server")
    return sorted({str(a) for a in archs}) if isinstance(archs, list) else None


# --- judgement ------------------------------------------------------------------------------------------


def figures_row(
    measured: dict, reference: dict | None, speculation: str, scale: float, min_ratio: float
) -> list:
    """One row per figure: {figure, label, measured, reference, ratio, verdict}. A pair's reference
    (_weights.catalog.pair_reference_figures) has a row for each figure it publishes alone, its decode held to
    the one it publishes whatever the speculation."""
    decode_figure = DECODE_FIGURE.get(speculation, "decode_2k")
    # A pair's reference: the figures it publishes, alone.
    only = reference["figures"] if reference and reference.get("pair") else None
    if only is not None and decode_figure not in only:
        decode_figure = "decode_2k"
    rows = []
    for figure in FIGURES:
        if only is not None and figure not in only:
            continue
        if figure in ("decode_2k", "dspark_decode"):
            if figure != decode_figure:
                continue
            value = measured.get("decode")
        else:
            value = measured.get(figure)
        published = None if reference is None else reference["figures"].get(figure)
        expected = None if published is None else round(published * scale, 1)
        ratio = None if value is None or not expected else round(value / expected, 2)
        verdict = UNKNOWN if ratio is None else (OK if ratio >= min_ratio else SLOW)
        rows.append(
            {
                "figure": figure,
                "label": LABELS[figure],
                "measured": value,
                "reference": expected,
                "ratio": ratio,
                "verdict": verdict,
            }
        )
    return rows


def _clock_low(gpu: dict) -> bool:
    """A busy GPU (not idle: NVML's gpu_idle bit 0x1 clear) well below its top SM clock."""
    clock, top, mask = (
        gpu.get("sm_clock_hertz"),
        gpu.get("sm_clock_max_hertz"),
        gpu.get("clocks_event_reasons"),
    )
    return bool(clock and top and mask is not None and not mask & 0x1 and clock < LOW_CLOCK_SHARE * top)


def find_causes(state: dict, slow: list[str], configured_speculation: str) -> list[dict]:
    """What in `state` can slow the `slow` figures, most likely first: [{cause, figures, text}]."""
    found = []

    def add(cause: str, text: str, figures: Any = "all") -> None:
        hit = slow if figures == "all" else [f for f in slow if f in figures]
        if hit:
            found.append({"cause": cause, "figures": hit, "text": text})

    arch, archs = state.get("arch"), state.get("native_archs")
    if arch and archs is not None and not any(is_native_for(a, arch) for a in archs):
        carries = ", ".join(archs) if archs else "none"
        add(
            "build-without-native-arch",
            f"the running release's build carries no native code for the GPU's {arch} (its build stamp "
            f"lists {carries}): the driver compiles PTX at load, or the code runs far from its tuned path; "
            f"rebuild it for {arch} (ds4_cuda_arch)",
        )
    lacking = without_spark_target(state.get("build"))
    if lacking:
        add(
            "build-without-spark-target",
            f"the running release was {lacking}. Without the Spark weight-read cache every routed-expert "
            "read crosses the C2C link; build a release whose cuda-spark builds native GB10 code "
            "(docs/engine.md, which make target)",
        )
    for gpu in state.get("gpus") or []:
        active = [reason for reason, on in (gpu.get("reasons") or {}).items() if on]
        if active:
            clock = gpu.get("sm_clock_hertz")
            top = gpu.get("sm_clock_max_hertz")
            share = f", SM clock {clock / 1e6:.0f} of {top / 1e6:.0f} MHz" if clock and top else ""
            hot = gpu.get("temperature_celsius")
            temperature = f", {hot:.0f} C" if hot is not None else ""
            add(
                "gpu-throttled",
                f"GPU {gpu['gpu']} is held back: {', '.join(active)} active{share}{temperature}; check its "
                f"cooling, airflow and power supply",
            )
        elif _clock_low(gpu):
            found.append(
                {
                    "cause": "clocks-low",
                    "figures": slow,
                    "text": f"GPU {gpu['gpu']}'s SM clock was {gpu['sm_clock_hertz'] / 1e6:.0f} of "
                    f"{gpu['sm_clock_max_hertz'] / 1e6:.0f} MHz when read, busy and with no reason reported",
                }
            )
    running = state.get("speculation")
    if configured_speculation == "dspark" and running is not None and running != "dspark":
        add(
            "speculation-off",
            f"the engine runs without DSpark ({running}) while ds4_speculation is dspark: decode is held to "
            f"DSpark's figure",
            ("dspark_decode", "aggregate_12"),
        )
    others = state.get("gpu_apps") or []
    if others:
        names = ", ".join(f"{a['name']} (pid {a['pid']})" for a in others)
        add("other-gpu-processes", f"other processes share the GPU: {names}")
    memory = state.get("memory") or {}
    swap, total, available = memory.get("swap_used"), memory.get("total"), memory.get("available")
    short = total and available is not None and available < AVAILABLE_SHARE * total
    if (swap is not None and swap > SWAP_USED_BYTES) or short:
        parts = []
        if swap is not None:
            parts.append(f"{swap / (1 << 30):.1f} GiB of swap in use")
        if available is not None and total:
            parts.append(f"{available / (1 << 30):.1f} of {total / (1 << 30):.1f} GiB available")
        add(
            "memory-pressure",
            f"memory pressure on the unified memory the weights are mapped into: {', '.join(parts)}",
        )
    if state.get("other_requests"):
        add(
            "other-requests",
            f"the engine served {state['other_requests']} other request(s) while it was measured",
        )
    if state.get("persistence") is False:
        add("persistence-off", "persistence mode is off: the driver may reinitialise the GPU between uses")
    order = {cause: i for i, cause in enumerate(CAUSES)}
    return sorted(found, key=lambda c: order[c["cause"]])


def judge(
    *,
    host: str,
    release: str,
    generation: str,
    speculation: str,
    reference: dict | None,
    measured: dict,
    state: dict,
    scale: Any,
    min_ratio: Any,
    now: float,
    pair: bool = False,
    family: str = DEFAULT_FAMILY,
    published: bool = True,
    pair_mode: str | None = None,
) -> dict:
    """The verification of one Spark (`pair`: a pair's coordinator, with its worker): its figures against
    the reference, its verdict and causes. `family` is the generation's model family; `published` False
    where the engine's authors published no figure of the generation at any release (Vision-Exp, V4.1,
    GLM 5.3, Qwen3.8), which the report says rather than naming a release. `pair_mode` is a pair's mode
    (pipeline or tensor), whose figures `reference` holds; the report keeps it (None for one Spark)."""
    minimum = check_ratio(min_ratio)
    factor = check_scale(scale)
    rows = figures_row(measured, reference, speculation, factor, minimum)
    slow = [row["figure"] for row in rows if row["verdict"] == SLOW]
    if reference is None:
        verdict = UNKNOWN
    elif slow:
        verdict = SLOW
    elif all(row["verdict"] == OK for row in rows):
        verdict = OK
    else:
        verdict = UNKNOWN
    causes = find_causes(state, slow, speculation) if slow else []
    ratios = [row["ratio"] for row in rows if row["ratio"] is not None]
    return {
        "format": FORMAT,
        "host": host,
        "verified_at": round(now, 3),
        "release": release,
        "family": family,
        "generation": generation,
        "published": published,
        "speculation": speculation,
        "pair": pair,
        "pair_mode": (pair_mode or "pipeline") if pair else None,
        "min_ratio": minimum,
        "scale": factor,
        "reference": reference,
        "figures": rows,
        "lowest_ratio": min(ratios) if ratios else None,
        "verdict": verdict,
        "slow": slow,
        "causes": causes,
        "state": state,
        "problems": measured.get("problems", []),
    }


def _tps(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def report_lines(report: dict) -> list[str]:
    """What an operator reads: the verdict, each figure, the reference's origin, the causes."""
    reference = report["reference"]
    head = {
        OK: f"{report['host']}: ok, every figure at least {report['min_ratio']:g} of the published one",
        SLOW: f"{report['host']}: SLOW, {', '.join(LABELS[f] for f in report['slow'])} below "
        f"{report['min_ratio']:g} of the published figure",
        UNKNOWN: f"{report['host']}: not judged"
        + (
            f": no published figure for {report.get('family', DEFAULT_FAMILY)} {report['generation']}"
            + (
                ": none published"
                if report.get("published") is False
                else f" at {report['release']} or before" + (" for a pair" if report.get("pair") else "")
            )
            if reference is None
            else ": a figure could not be measured"
        ),
    }[report["verdict"]]
    lines = [head]
    for row in report["figures"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(
            f"  {row['label']:<26} measured {_tps(row['measured']):>8} tok/s"
            f"  reference {_tps(row['reference']):>8}  ratio {ratio:>5}  {row['verdict']}"
        )
    if reference is not None:
        scaled = (
            "" if report["scale"] == 1 else f", scaled by {report['scale']:g} (ds4_verify_reference_scale)"
        )
        at = "" if reference.get("pair") else f" at {reference['release']}"
        lines.append(
            f"  reference: {report['generation']}{at} ({reference['note']}), "
            f"stamped {reference['stamp']}{scaled}; {reference['source']}"
        )
    for number, cause in enumerate(report["causes"], 1):
        lines.append(f"  cause {number}: {cause['text']}")
    if report["verdict"] == SLOW and not report["causes"]:
        lines.append("  no cause found in the GPU's state, the build or the memory")
    for problem in report["problems"]:
        lines.append(f"  note: {problem}")
    return lines


def summary_of(report: dict | None) -> dict | None:
    """The few fields of a verification the fleet status and the metrics carry."""
    if not isinstance(report, dict) or report.get("format") != FORMAT:
        return None
    return {
        "verified_at": report.get("verified_at"),
        "release": report.get("release"),
        "verdict": report.get("verdict"),
        "lowest_ratio": report.get("lowest_ratio"),
        "min_ratio": report.get("min_ratio"),
        "slow": report.get("slow") or [],
        "cause": (report.get("causes") or [{}])[0].get("cause"),
        "ratios": {row["figure"]: row["ratio"] for row in report.get("figures") or []},
    }
