"""STAND-IN for `ds4-bench`, the ds4 engine's throughput benchmark (test infrastructure of ds4-fleet,
NOT the real engine).

It measures nothing: given a model it validates it and takes the lock like every engine program, then
prints one plausible result line with fixed numbers and exits 0.
"""

import os

import ds4_common as common
from ds4_common import Option

PROGRAM = "ds4-bench"
# Fixed, plausible GB10 figures; the stand-in has nothing to measure.
PREFILL_TOKENS, PREFILL_RATE = 2048, 1843.2
DECODE_TOKENS, DECODE_RATE = 128, 21.7


def bench_options(build: common.Build) -> list[Option]:
    return common.model_options(build) + common.identity_options(build)


def run(build: common.Build, opts: dict) -> int:
    if opts["model"] or os.environ.get("GGUF_FILE"):
        model_path = common.resolve_model_path(opts["model"])
        common.acquire_engine_lock()
        common.load_models(model_path, common.choose_speculation(opts))
        common.wait_for_load(lambda: False)
    backend = common.backend_name(build, opts["cuda"])
    print(
        f"{PROGRAM}: {backend}: prefill {PREFILL_TOKENS} tok {PREFILL_RATE:.1f} tok/s, "
        f"decode {DECODE_TOKENS} tok {DECODE_RATE:.1f} tok/s (stand-in, fixed numbers)",
        flush=True,
    )
    return 0


def main(argv: list[str], build: common.Build) -> int:
    return common.run_program(argv, build, "[options]", bench_options(build), lambda opts: run(build, opts))
