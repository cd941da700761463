"""STAND-IN for `ds4`, the ds4 engine's one-shot command line (test infrastructure of ds4-fleet, NOT the
real engine).

`ds4 --cuda -m BASE -c 4096 -p PROMPT` validates the model files and takes the single-instance lock like
the server, "loads" for DS4_STANDIN_LOAD_DELAY seconds, then prints the answer from the fixed table in
ds4_common on stdout. The installer's smoke test runs exactly this.
"""

import time

import ds4_common as common
import ds4_tensor as tensor
from ds4_common import Option

PROGRAM = "ds4"


def cli_options(build: common.Build) -> list[Option]:
    # Upstream's CLI is also a tensor pair's worker (engine contract): the roles and the tensor flags.
    tensor_worker = common.dist_options() + tensor.options(build) if build.upstream else []
    return (
        common.model_options(build)
        + [Option(("-p", "--prompt"), "prompt", "str", "answer PROMPT and exit", "PROMPT")]
        + tensor_worker
        + common.identity_options(build)
    )


def run(build: common.Build, opts: dict) -> int:
    tensor.check_options(opts, PROGRAM)
    if opts.get("tensor_parallel"):
        return tensor.run_worker(build, opts)
    if opts.get("role") or opts.get("layers") or opts.get("listen") or opts.get("coordinator"):
        # Guess: the stand-in has the pipeline's roles on ds4-server alone.
        raise common.EngineError(f"{PROGRAM}: --role without --tensor-parallel is ds4-server's", 2)
    if opts["prompt"] is None:
        # Guess: the real CLI may offer an interactive mode; the stand-in only answers -p.
        raise common.EngineError(f"{PROGRAM}: no prompt given (-p PROMPT)", 2)
    model_path = common.resolve_model_path(opts["model"])
    speculation = common.choose_speculation(opts)
    common.acquire_engine_lock()
    common.load_models(model_path, speculation)
    context = opts["ctx"] or build.default_context
    common.log(f"ds4: backend {common.backend_name(build, opts['cuda'])}, context {context}")
    common.wait_for_load(lambda: False)
    prompt, delay = common.split_sleep_marker(opts["prompt"])
    started = time.monotonic()
    time.sleep(delay)
    words = common.answer_for(prompt, build.flavour).split()[: opts["tokens"] or common.DEFAULT_TOKENS]
    print(" ".join(words), flush=True)
    common.log(
        f"ds4: prompt {common.count_tokens(prompt)} tok, answer {len(words)} tok, "
        f"{time.monotonic() - started:.2f} s"
    )
    return 0


def main(argv: list[str], build: common.Build) -> int:
    return common.run_program(
        argv, build, "[options] -p PROMPT", cli_options(build), lambda opts: run(build, opts)
    )
