"""The speed gate: the running engine measured through its HTTP API, and the figures compared with those of
the release it replaced, on the same Spark, model set and launch settings.

Measurement (`measure`): a few streamed chat completions, each a fixed prefill (a prompt of a few thousand
tokens) followed by a fixed decode (a few hundred tokens). Streaming separates the two in one request:
the engine sends its first event (the role chunk) once the prompt is prefilled, then the generated text;
the token counts come from the `usage` the engine sends at the end of the stream when asked
(`stream_options.include_usage`), prompt tokens it took from its KV cache (`cached_tokens`) not counted
as prefilled. Each prompt starts with a nonce, so no run reuses the KV prefix of another (the engine caches
prompt prefixes, also across restarts with --kv-disk-dir). The best run counts: on a GPU, noise only slows
a run down (a neighbour process, a clock ramping up), so the fastest run is the least noisy figure.

Comparison (`compare`, `evaluate`): each figure against the baseline's; a drop beyond the allowed
percentage in either is a regression. A figure missing on either side is not compared, and says so.

History (`load_history`, `write_history`): the records of one Spark, newest last, in a local fact file
(ansible_local.ds4_perf), at most `keep` of them.

Standard library only, so that the module needs nothing installed on the host.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import uuid
from typing import Any

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.ds4.fleet.plugins.module_utils._service.smoke import DEFAULT_MODEL, chat_url

# The engine's model id and chat endpoint have one owner: the smoke test asks the same engine the same way.
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    json_object,
    json_post,
    request_failure,
)

FORMAT = 1
METRICS = ("prefill", "decode")
GATES = ("enforce", "warn")

# Verdicts of a record. A rolled-back release never served: it is neither a baseline nor on record as
# what a Spark runs.
BASELINE, PASSED, ROLLED_BACK, KEPT_SLOWER = "baseline", "passed", "rolled-back", "kept-slower"

# Filler of the prefill prompt: plain words, cycled. English prose is about 4/3 tokens a word for the
# DeepSeek tokenizer, so a prompt of N tokens takes about 3/4 N words; the engine's own count is recorded.
_FILLER = (
    "The survey ship logged the weather at every station along the northern coast, noting wind, "
    "pressure, cloud and the colour of the sea before it sailed on to the next harbour."
)


class PerfError(Exception):
    """The engine could not be measured: it did not answer, or not as a chat completion stream."""


class PerfSettingError(ValueError):
    """A setting of the gate that cannot be used, named in the message."""


# --- measurement -------------------------------------------------------------------------------------


def build_prompt(prompt_tokens: int, decode_tokens: int, nonce: str) -> str:
    """The prefill prompt: a nonce line, about `prompt_tokens` tokens of filler, and a request for a long
    answer (a count that does not end before `decode_tokens` tokens)."""
    vocabulary = _FILLER.split()
    words = max(prompt_tokens * 3 // 4, 1)
    filler = " ".join(vocabulary[i % len(vocabulary)] for i in range(words))
    return (
        f"Measurement {nonce}.\n{filler}\n"
        f"Ignore the text above. Count upward from 1 to {decode_tokens * 2}, one number per line."
    )


def _int(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def stream_once(
    base_url: str, prompt: str, max_tokens: int, timeout: float, model: str = DEFAULT_MODEL
) -> dict:
    """One streamed completion, timed: seconds to the first event (prefill), from there to the last
    event with a choice (decode), and the usage the engine reported (None when it sent none)."""
    url = chat_url(base_url)
    body = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": prompt}],
    }
    sent = time.monotonic()
    first: float | None = None
    last = sent
    usage = None
    try:
        with open_url(**json_post(url, body), timeout=timeout) as response:
            for raw in response:
                line = raw.decode("utf-8", "replace").strip()
                # Comments (": prefill" keep-alives during a long prefill) and blank lines carry no event.
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                now = time.monotonic()
                try:
                    event = json_object(data)
                except ValueError as exc:
                    raise PerfError(f"{url} streamed {exc}: {data[:200]!r}") from None
                if event.get("choices"):
                    first = now if first is None else first
                    last = now
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
    except (urllib.error.URLError, OSError, UrlsConnectionError) as exc:
        raise PerfError(request_failure(url, exc, timeout, "finish the measurement")) from exc
    if first is None:
        raise PerfError(f"{url} streamed no completion events")
    return {"prefill_s": first - sent, "decode_s": last - first, "usage": usage}


def run_figures(timed: dict) -> dict:
    """Tokens per second of one timed run; a figure the engine's usage does not allow is None, with why."""
    usage = timed.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        details = {}
    cached = _int(details.get("cached_tokens")) or 0
    completion = _int(usage.get("completion_tokens"))
    figures = {
        "prefill_tps": None,
        "decode_tps": None,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": completion,
        "prefill_s": round(timed["prefill_s"], 4),
        "decode_s": round(timed["decode_s"], 4),
        "problems": [],
    }
    if not usage:
        figures["problems"].append("the engine reported no usage in its stream")
    if prompt is not None and prompt - cached > 0 and timed["prefill_s"] > 0:
        figures["prefill_tps"] = round((prompt - cached) / timed["prefill_s"], 1)
    elif usage:
        figures["problems"].append(f"no prefill figure: {prompt} prompt tokens, {cached} from the cache")
    if completion and completion > 1 and timed["decode_s"] > 0:
        figures["decode_tps"] = round(completion / timed["decode_s"], 1)
    elif usage:
        figures["problems"].append(f"no decode figure: {completion} tokens generated")
    return figures


def best(values):
    values = [value for value in values if value is not None]
    return max(values) if values else None


def measure(
    base_url: str,
    prompt_tokens: int,
    decode_tokens: int,
    runs: int,
    timeout: float,
    model: str = DEFAULT_MODEL,
    stream: Any = stream_once,
) -> dict:
    """`runs` timed runs; the best figure of each kind, and every run's figures."""
    started = time.monotonic()
    results = []
    for _run in range(runs):
        prompt = build_prompt(prompt_tokens, decode_tokens, uuid.uuid4().hex[:12])
        results.append(run_figures(stream(base_url, prompt, decode_tokens, timeout, model)))
    return {
        "prefill_tps": best(r["prefill_tps"] for r in results),
        "decode_tps": best(r["decode_tps"] for r in results),
        "prompt_tokens": results[-1]["prompt_tokens"],
        "completion_tokens": results[-1]["completion_tokens"],
        "runs": results,
        "seconds": round(time.monotonic() - started, 2),
    }


# --- comparison ---------------------------------------------------------------------------------------


def check_max_regression(value: Any) -> float:
    if isinstance(value, bool):
        raise PerfSettingError(f"ds4_perf_max_regression is a percentage above 0 and below 100: {value!r}")
    try:
        limit = float(value)
    except (TypeError, ValueError) as exc:
        raise PerfSettingError(
            f"ds4_perf_max_regression is a percentage above 0 and below 100: {value!r}"
        ) from exc
    if not 0 < limit < 100:
        raise PerfSettingError(f"ds4_perf_max_regression is a percentage above 0 and below 100: {value!r}")
    return limit


def _figure(record, metric):
    value = (record or {}).get(f"{metric}_tps")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def compare(new: dict, baseline: dict, max_regression: Any) -> dict:
    """Each figure of `new` against `baseline`'s: {metrics: {prefill: {new, old, change_pct, regressed}},
    regressed: [...], missing: [...]}. A figure missing on either side is listed in `missing`."""
    limit = check_max_regression(max_regression)
    result: dict[str, Any] = {"metrics": {}, "regressed": [], "missing": [], "max_regression": limit}
    for metric in METRICS:
        now, old = _figure(new, metric), _figure(baseline, metric)
        if now is None or old is None:
            result["missing"].append(metric)
            result["metrics"][metric] = {"new": now, "old": old, "change_pct": None, "regressed": False}
            continue
        change = round((now - old) / old * 100.0, 1)
        regressed = (old - now) / old * 100.0 > limit
        result["metrics"][metric] = {"new": now, "old": old, "change_pct": change, "regressed": regressed}
        if regressed:
            result["regressed"].append(metric)
    return result


def _tps(value: Any) -> str:
    return "no figure" if value is None else f"{value:.1f} tok/s"


def describe(comparison: dict, release: str, baseline_release: str | None) -> str:
    """The figures side by side: `decode 140.0 tok/s against 200.0 tok/s of v0.6.5 (-30.0%)`."""
    parts = []
    for metric in METRICS:
        m = comparison["metrics"][metric]
        change = "" if m["change_pct"] is None else f" ({m['change_pct']:+.1f}%)"
        parts.append(f"{metric} {_tps(m['new'])} against {_tps(m['old'])} of {baseline_release}{change}")
    return f"{release}: " + "; ".join(parts)


# --- identity and history -----------------------------------------------------------------------------


def setup_of(launch: dict) -> tuple[dict, dict]:
    """The model set (file names by role) and the launch settings that bear on speed, from the registered
    result of ds4_launch_config. The listen address and port do not change a speed and are left out."""
    if not isinstance(launch, dict) or not isinstance(launch.get("settings"), dict):
        raise PerfSettingError(f"launch must be the result of ds4_launch_config: {launch!r}"[:300])
    settings = launch["settings"]
    models = {
        role: os.path.basename(str(settings[key]))
        for role, key in (("base", "base_model"), ("dspark", "dspark_model"), ("mtp", "mtp_model"))
        if settings.get(key)
    }
    args, skip = [], False
    for arg in [str(a) for a in launch.get("args") or []]:
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port"):
            skip = True
            continue
        args.append(arg)
    env = {str(k): str(v) for k, v in (launch.get("env") or {}).items()}
    return models, {"args": args, "env": env}


def read_stamp(release_dir: str) -> dict:
    """{release, commit} of a release directory, from its build stamp; the directory's name otherwise."""
    info = {"release": os.path.basename(release_dir.rstrip("/")) or None, "commit": None}
    try:
        with open(os.path.join(release_dir, ".ds4-build.json"), encoding="utf-8") as handle:
            stamp = json.load(handle)
        if isinstance(stamp, dict):
            info["release"] = stamp.get("release") or info["release"]
            info["commit"] = stamp.get("commit")
    except (OSError, ValueError):
        pass
    return info


def same_release(record: dict, release: dict) -> bool:
    if record.get("release") != release.get("release"):
        return False
    # A moved tag is another build: commits decide when both are known.
    return not (record.get("commit") and release.get("commit") and record["commit"] != release["commit"])


def latest(history: list, release: dict, models: dict, settings: dict) -> dict | None:
    """The newest record of `release` on this model set and these settings that served (not rolled back)."""
    for record in reversed(history):
        if (
            same_release(record, release)
            and record.get("models") == models
            and record.get("settings") == settings
            and record.get("verdict") != ROLLED_BACK
        ):
            return record
    return None


def load_history(path: str) -> list:
    """The records in the fact file, newest last; [] when there is none. A damaged file is refused."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise PerfSettingError(f"{path} is not a readable measurement history: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("history"), list):
        raise PerfSettingError(f"{path} is not a measurement history (no history list)")
    return [record for record in data["history"] if isinstance(record, dict)]


def write_history(path: str, history: list, keep: int) -> None:
    """The newest `keep` records, written beside the file and renamed over it (never through a link)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    content = json.dumps({"format": FORMAT, "history": history[-keep:]}, indent=1, sort_keys=True) + "\n"
    fd, temporary = tempfile.mkstemp(prefix=".ds4_perf.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# --- the decision -------------------------------------------------------------------------------------


def plan(history: list, release: dict, replaced: dict | None, models: dict, settings: dict) -> dict:
    """Whether to measure, and against what. Measured: after a switch to another release, and whenever
    the release, model set and settings that run have no figures on record (a first install, a changed
    model set or settings, a Spark provisioned before the gate). Otherwise the figures on record stand,
    so that a run that changes nothing measures nothing and writes nothing."""
    switched = replaced is not None and bool(replaced.get("release")) and not same_release(replaced, release)
    on_record = latest(history, release, models, settings)
    if (not switched or replaced is None) and on_record is not None:
        return {"measure": False, "baseline": None, "on_record": on_record, "why": "on record"}
    if not switched or replaced is None:
        why = (
            "first measurement on this Spark"
            if not history
            else f"no figures of {release['release']} on this model set, launch settings and measurement yet"
        )
        return {"measure": True, "baseline": None, "on_record": None, "why": why}
    baseline = latest(history, replaced, models, settings)
    if baseline is not None:
        return {"measure": True, "baseline": baseline, "on_record": None, "why": "compared"}
    if not history:
        why = "first measurement on this Spark"
    elif any(same_release(r, replaced) and r.get("verdict") != ROLLED_BACK for r in history):
        why = (
            f"the model set, launch settings or measurement changed since {replaced['release']} was measured"
        )
    else:
        why = f"{replaced['release']}, which ran before, was never measured"
    return {"measure": True, "baseline": None, "on_record": None, "why": why}


def evaluate(
    measured: dict,
    release: dict,
    baseline: dict | None,
    why: str,
    models: dict,
    settings: dict,
    max_regression: Any,
    gate: str,
    now: float | None = None,
) -> dict:
    """The record of a measurement, its verdict and the message an operator reads."""
    if gate not in GATES:
        raise PerfSettingError(f"ds4_perf_gate is one of {', '.join(GATES)}: {gate!r}")
    record = {
        "measured_at": round(time.time() if now is None else now, 3),
        "release": release.get("release"),
        "commit": release.get("commit"),
        "models": models,
        "settings": settings,
        "prefill_tps": measured.get("prefill_tps"),
        "decode_tps": measured.get("decode_tps"),
        "prompt_tokens": measured.get("prompt_tokens"),
        "completion_tokens": measured.get("completion_tokens"),
        "runs": len(measured.get("runs") or []),
        "baseline": None,
        "change_pct": None,
    }
    problems = sorted({p for run in measured.get("runs") or [] for p in run.get("problems", [])})
    figures = f"prefill {_tps(record['prefill_tps'])}, decode {_tps(record['decode_tps'])}"
    if baseline is None:
        record["verdict"] = BASELINE
        message = f"{release['release']}: {figures}; recorded as the baseline, nothing compared ({why})"
    else:
        message = _judge(record, baseline, max_regression, gate, release["release"])
    if problems:
        message += f" ({'; '.join(problems)})"
    record["message"] = message
    return {"record": record, "failed": record["verdict"] == ROLLED_BACK, "message": message}


def _judge(record: dict, baseline: dict, max_regression: Any, gate: str, release: str) -> str:
    """Compare the record with its baseline and set its verdict; the message that says why."""
    comparison = compare(record, baseline, max_regression)
    record["baseline"] = {
        key: baseline.get(key) for key in ("release", "commit", "measured_at", "prefill_tps", "decode_tps")
    }
    record["change_pct"] = {m: comparison["metrics"][m]["change_pct"] for m in METRICS}
    side_by_side = describe(comparison, release, baseline.get("release"))
    limit = f"ds4_perf_max_regression ({comparison['max_regression']:g}%)"
    if comparison["regressed"]:
        slower = " and ".join(comparison["regressed"])
        if gate == "enforce":
            record["verdict"] = ROLLED_BACK
            message = f"{side_by_side}: {slower} slower than {limit} allows on this Spark"
        else:
            record["verdict"] = KEPT_SLOWER
            message = f"{side_by_side}: {slower} slower than {limit} allows; kept, as ds4_perf_gate is warn"
    else:
        record["verdict"] = PASSED
        message = f"{side_by_side}: within {limit}"
    if comparison["missing"]:
        message += f"; not compared, for want of a figure: {', '.join(comparison['missing'])}"
    return message
