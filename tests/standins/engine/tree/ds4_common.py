"""STAND-IN for the ds4 engine: test infrastructure of ds4-fleet, NOT the real engine.

Code shared by the stand-in programs `ds4`, `ds4-server` and `ds4-bench`; `link.py` packs it into each of
them, as the real Makefile links one engine library into every binary. It follows the engine contract of
ds4-fleet (docs/engine-contract.md in the shared docs); guesses where the contract is silent are marked
"Guess". Python 3 standard library only: the target hosts have Debian bookworm's python3.11.
"""

import fcntl
import itertools
import json
import os
import re
import struct
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass

MODEL_ID = "deepseek-v4-flash"
MODEL_NAME = "DeepSeek V4 Flash"
DEFAULT_LOCK_FILE = "/tmp/ds4.lock"
DEFAULT_UPDATE_URL = "https://raw.githubusercontent.com/Entrpi/ds4-on-spark/main/LATEST"
UPDATE_TIMEOUT_S = 3
# Guess: the base name the engine looks for in DS4_GGUF_DIR when neither -m nor GGUF_FILE is given.
DEFAULT_BASE_NAME = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"

# Stand-in only: seconds spent "loading" before the engine is ready (the real one needs 40-50 s on a Spark).
LOAD_DELAY_ENV = "DS4_STANDIN_LOAD_DELAY"
DEFAULT_LOAD_DELAY_S = 2.0
# Guess: the contract does not give the default of -n/--tokens.
DEFAULT_TOKENS = 4096


class EngineError(Exception):
    """A refusal: the message is logged as it stands and the program exits with `status`."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.message = message
        self.status = status


class UsageError(Exception):
    """A command line the program refuses: logged, followed by the usage, exit 2."""


# --- build identity ------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, ...]:
    """`v0.6.5` -> (0, 6, 5); `v0.6.5.1` -> (0, 6, 5, 1). Raises ValueError on anything else."""
    match = _VERSION_RE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a release version: {text!r}")
    return tuple(int(part) for part in match.groups() if part is not None)


@dataclass(frozen=True)
class Build:
    """What `link.py` bakes into each program: the release it was built from and for which GPU."""

    program: str
    version: str
    flavour: str
    arch: str
    cuda: str
    # The Spark weight-read cache: "1" (make cuda-spark), "runtime" (decided at start-up), "" (without).
    spark_cache: str = ""
    # "fork" (Entrpi/ds4, tagged) or "upstream" (antirez/ds4, untagged: its version is no release number).
    lineage: str = "fork"

    @property
    def upstream(self) -> bool:
        return self.lineage == "upstream"

    @property
    def has_version_flag(self) -> bool:
        # Only fork releases from v0.6.0 on know --version; older ones refuse it as an unknown option.
        # Guess: upstream, which has no releases to name, has none either.
        return not self.upstream and parse_version(self.version) >= (0, 6, 0)

    @property
    def default_context(self) -> int:
        # The contract: 32768 -> 262144 -> 524288 (v0.6). Guess: the middle step came with v0.5; upstream
        # late 2026 as the fork's newest.
        if self.upstream:
            return 524288
        release = parse_version(self.version)
        if release >= (0, 6, 0):
            return 524288
        return 262144 if release >= (0, 5, 0) else 32768

    @property
    def spark_advisory(self) -> str | None:
        """The fork's boot-log line (v0.5.5 on) on a GB10 build without the Spark weight-read cache, which
        names the faster target; None for any other build. Its wording is a guess: the changelog says only
        that the boot log names the faster target once."""
        if self.upstream or not self.arch.startswith("sm_121") or self.spark_cache:
            return None
        if parse_version(self.version) < (0, 5, 5):
            return None
        return (
            f"{self.program}: GB10 build without the Spark weight-read cache (generic make cuda); "
            "build with make cuda-spark for faster serving"
        )

    def version_line(self) -> str:
        return f"{self.program} {self.version} (cuda {self.arch}, CUDA {self.cuda})"


# --- logging -------------------------------------------------------------------------------------------

# Re-entrant: a signal handler may log while the main thread is half way through a line.
_log_lock = threading.RLock()


def log(message: str) -> None:
    """One line on stderr, prefixed `MMDD HH:MM:SS ` like every log line of the engine."""
    stamp = time.strftime("%m%d %H:%M:%S")
    with _log_lock:
        sys.stderr.write(f"{stamp} {message}\n")
        sys.stderr.flush()


def env_flag(name: str) -> bool:
    """The engine's reading of a switch variable: set and not "0" means on."""
    value = os.environ.get(name, "").strip()
    return value not in ("", "0")


def env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise EngineError(f"ds4: invalid value for {name}: {raw!r}", 2) from None


# --- command line --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    names: tuple[str, ...]
    dest: str
    kind: str  # "flag", "str", "int" or "hostport" (two values: HOST PORT)
    help: str
    metavar: str = ""


def model_options(build: Build) -> list[Option]:
    """The model and decoding options every engine program shares."""
    return [
        Option(("-m", "--model"), "model", "str", "base model GGUF (else GGUF_FILE, DS4_GGUF_DIR)", "FILE"),
        # Alone (no FILE after it), the model's own MTP block: GLM 5.3's.
        Option(("--mtp",), "mtp", "optional", "MTP head GGUF (legacy), or alone a built-in block", "[FILE]"),
        *dspark_options(build),
        Option(("--no-mtp",), "no_mtp", "flag", "do not use an MTP head"),
        Option(("--no-dspark",), "no_dspark", "flag", "do not use a DSpark drafter"),
        Option(("--no-spec",), "no_spec", "flag", "no speculative decoding at all"),
        Option(("-c", "--ctx"), "ctx", "int", f"context tokens (default {build.default_context})", "N"),
        Option(("-n", "--tokens"), "tokens", "int", f"max tokens per answer (default {DEFAULT_TOKENS})", "N"),
        Option(("--cuda",), "cuda", "flag", "run on the CUDA backend"),
        # The late-2026 families (engine contract): streamed experts, the GPU power cap, a vision encoder.
        Option(("--ssd-streaming",), "ssd_streaming", "flag", "stream routed experts from local disk"),
        Option(("--ssd-streaming-cache-experts",), "ssd_cache", "str", "expert cache size, like 64GB", "NGB"),
        Option(("--power",), "power", "int", "sustained GPU power, percent", "N"),
        Option(("--vision",), "vision", "str", "vision encoder GGUF", "FILE"),
    ]


def dspark_options(build: Build) -> list[Option]:
    """The fork takes its drafter as `--dspark FILE`; upstream's `--dspark` is a switch, its DSpark support
    GGUF given with `--mtp-model FILE` (so upstream refuses the fork's form: FILE is an unknown option)."""
    if build.upstream:
        return [
            Option(("--dspark",), "dspark", "flag", "DSpark speculative decoding (needs --mtp-model)"),
            Option(("--mtp-model",), "mtp_model", "str", "DSpark support GGUF", "FILE"),
        ]
    return [Option(("--dspark",), "dspark", "str", "DSpark drafter GGUF (else DS4_DSPARK_MODEL)", "FILE")]


def dist_options() -> list[Option]:
    """The distributed mode's flags (the contract: the same on ds4, ds4-server and ds4-bench; the stand-in
    has them on ds4-server)."""
    return [
        Option(("--role",), "role", "str", "worker or coordinator of a two-host pipeline", "ROLE"),
        Option(
            ("--layers",), "layers", "str", "this host's slice of the layers, A:B (B may be output)", "A:B"
        ),
        Option(("--listen",), "listen", "hostport", "coordinator: where the worker registers", "HOST PORT"),
        Option(
            ("--coordinator",), "coordinator", "hostport", "worker: the coordinator's --listen", "HOST PORT"
        ),
        Option(("--dist-prefill-chunk",), "dist_prefill_chunk", "int", "coordinator: prefill chunk", "N"),
        Option(("--dist-prefill-window",), "dist_prefill_window", "int", "coordinator: prefill window", "N"),
        Option(("--dist-activation-bits",), "dist_activation_bits", "int", "coordinator: 16 or 8", "N"),
    ]


def identity_options(build: Build) -> list[Option]:
    """--version exists only from v0.6.0 on; --help on every release."""
    options = [Option(("-h", "--help"), "help", "flag", "print this help and exit")]
    if build.has_version_flag:
        options.append(Option(("--version",), "version", "flag", "print the version and exit"))
    return options


def usage_text(program: str, synopsis: str, options: list[Option]) -> str:
    lines = [f"usage: {program} {synopsis}", "options:"]
    for option in options:
        left = ", ".join(option.names) + (f" {option.metavar}" if option.metavar else "")
        lines.append(f"  {left:<26} {option.help}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str], options: list[Option]) -> dict:
    """The engine's hand-written parser: `--opt VALUE` only (guess: no `--opt=VALUE`), last one wins."""
    by_name = {name: option for option in options for name in option.names}
    values: dict = {option.dest: (False if option.kind == "flag" else None) for option in options}
    args = iter(argv)
    while (arg := next(args, None)) is not None:
        option = by_name.get(arg)
        if option is None:
            raise UsageError(f"unknown option: {arg}")
        if option.kind == "flag":
            values[option.dest] = True
            continue
        if option.kind == "optional":
            # Takes the next word as its value unless that is another option (or there is none).
            following = next(args, None)
            if following is not None and following.startswith("-"):
                args = itertools.chain([following], args)
                following = None
            values[option.dest] = True if following is None else following
            continue
        value = next(args, None)
        if value is None:
            raise UsageError(f"option {arg} needs a value")
        if option.kind == "hostport":
            port = next(args, None)
            if port is None or not port.isdigit() or not 0 < int(port) < 65536:
                raise UsageError(f"option {arg} needs HOST PORT, got {value!r} {port!r}")
            values[option.dest] = (value, int(port))
            continue
        if option.kind == "int":
            try:
                value = int(value)
            except ValueError:
                raise UsageError(f"invalid value for {arg}: {value!r}") from None
            if value < 0:
                raise UsageError(f"invalid value for {arg}: {value}")
        values[option.dest] = value
    return values


def run_program(argv: list[str], build: Build, synopsis: str, options: list[Option], body) -> int:
    """What every engine program does with its command line: refuse (exit 2 with the usage), --help,
    --version, else `body(opts)`, whose EngineError is logged and becomes the exit status."""
    usage = usage_text(build.program, synopsis, options)
    try:
        opts = parse_args(argv, options)
    except UsageError as error:
        log(f"{build.program}: {error}")
        sys.stderr.write(usage)
        sys.stderr.flush()
        return 2
    if opts["help"]:
        sys.stdout.write(usage)
        return 0
    if opts.get("version"):
        print(build.version_line())
        return 0
    try:
        return body(opts)
    except EngineError as error:
        log(error.message)
        return error.status


# --- GGUF ----------------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_STRING = 8
GGUF_ARRAY = 9
_GGUF_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}


class NotGGUF(Exception):
    pass


class GGUFCorrupt(Exception):
    pass


@dataclass(frozen=True)
class GGUFArray:
    """An array value, kept as its element type and length: the reader never loads a token table."""

    elem_type: int
    count: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    tensor_count: int
    metadata: dict


class _Reader:
    def __init__(self, stream, size: int):
        self.stream = stream
        self.size = size

    def take(self, count: int) -> bytes:
        if count > self.size - self.stream.tell():
            raise GGUFCorrupt("truncated metadata")
        return self.stream.read(count)

    def skip(self, count: int) -> None:
        if count > self.size - self.stream.tell():
            raise GGUFCorrupt("truncated metadata")
        self.stream.seek(count, os.SEEK_CUR)

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.scalar("<Q")).decode("utf-8", errors="replace")

    def value(self, value_type: int):
        if value_type in _GGUF_SCALARS:
            return self.scalar(_GGUF_SCALARS[value_type])
        if value_type == GGUF_STRING:
            return self.string()
        if value_type == GGUF_ARRAY:
            elem_type = self.scalar("<I")
            count = self.scalar("<Q")
            if elem_type in _GGUF_SCALARS:
                self.skip(count * struct.calcsize(_GGUF_SCALARS[elem_type]))
            elif elem_type == GGUF_STRING:
                for _ in range(count):
                    self.skip(self.scalar("<Q"))
            else:
                raise GGUFCorrupt(f"unsupported array element type {elem_type}")
            return GGUFArray(elem_type, count)
        raise GGUFCorrupt(f"unsupported value type {value_type}")


def read_gguf_header(path: str) -> GGUFHeader:
    """Magic, version, tensor count and the typed key/values of a little-endian GGUF v2/v3 file.

    Raises OSError when the file cannot be opened, NotGGUF without the magic, GGUFCorrupt otherwise.
    """
    with open(path, "rb") as stream:
        reader = _Reader(stream, os.fstat(stream.fileno()).st_size)
        if stream.read(4) != GGUF_MAGIC:
            raise NotGGUF(path)
        version = reader.scalar("<I")
        if version not in (2, 3):
            raise GGUFCorrupt(f"unsupported GGUF version {version}")
        tensor_count = reader.scalar("<Q")
        kv_count = reader.scalar("<Q")
        metadata = {}
        for _ in range(kv_count):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("<I"))
        return GGUFHeader(version, tensor_count, metadata)


def open_model(path: str) -> GGUFHeader:
    """Validate a model file the way the engine does before it maps it; messages as the contract shows."""
    try:
        header = read_gguf_header(path)
    except OSError as error:
        raise EngineError(f"ds4: cannot open model '{path}': {os.strerror(error.errno or 5)}") from None
    except NotGGUF:
        raise EngineError("ds4: model is not a GGUF file") from None
    except GGUFCorrupt as error:
        # Guess: the contract does not show the message for a damaged header.
        raise EngineError(f"ds4: GGUF file '{path}' is invalid: {error}") from None
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if not (isinstance(tokens, GGUFArray) and tokens.elem_type == GGUF_STRING and tokens.count > 0):
        raise EngineError("ds4: GGUF tokenizer token table is missing or invalid")
    return header


def describe_model(path: str, header: GGUFHeader) -> str:
    arch = header.metadata.get("general.architecture", "unknown")
    tokens = header.metadata["tokenizer.ggml.tokens"].count
    size = os.path.getsize(path)
    return (
        f"'{path}' ({size} bytes, GGUF v{header.version}, arch {arch}, "
        f"{header.tensor_count} tensors, {tokens} tokens)"
    )


def backend_name(build: Build, cuda: bool) -> str:
    # Guess: without --cuda the engine falls back to its (slow) CPU path rather than refusing.
    return f"cuda {build.arch}" if cuda else "cpu"


def resolve_model_path(given: str | None) -> str:
    """-m wins; then GGUF_FILE; then the default base name in DS4_GGUF_DIR (guess: default `gguf`)."""
    if given:
        return given
    if os.environ.get("GGUF_FILE"):
        return os.environ["GGUF_FILE"]
    return os.path.join(os.environ.get("DS4_GGUF_DIR") or "gguf", DEFAULT_BASE_NAME)


@dataclass(frozen=True)
class Speculation:
    mode: str  # "dspark", "mtp" or "off"
    model: str | None


def choose_speculation(opts: dict) -> Speculation:
    """DSpark first (flag, or DS4_CONT_DSPARK with DS4_DSPARK_MODEL), then MTP, else plain decoding."""
    if opts["no_spec"]:
        return Speculation("off", None)
    if opts["dspark"] is True:
        # Upstream's switch: its support GGUF comes with --mtp-model. Guess: the wording, and exit 2.
        if opts["no_dspark"] or not opts["mtp_model"]:
            raise EngineError("--dspark needs --mtp-model FILE (the DSpark support GGUF)", 2)
        return Speculation("dspark", opts["mtp_model"])
    if not opts["no_dspark"]:
        drafter = opts["dspark"] or None
        if drafter is None and env_flag("DS4_CONT_DSPARK"):
            drafter = os.environ.get("DS4_DSPARK_MODEL") or None
        if drafter:
            return Speculation("dspark", drafter)
    if not opts["no_mtp"] and opts["mtp"]:
        return Speculation("mtp", None if opts["mtp"] is True else opts["mtp"])
    return Speculation("off", None)


_CACHE_SIZE = re.compile(r"[1-9][0-9]*GB")
# The Vision-Exp base's name, and the 0731 drafter's mark (the installer's rule: "-0731" is of 0731).
_VISION_EXP_MARK = "-Vision-Exp-"


def check_family_options(model_path: str, opts: dict, speculation: Speculation) -> None:
    """The families' refusals, as the contract gives them (the messages are guesses): a cache size must
    carry its unit, and a Vision-Exp base refuses the 0731 drafter."""
    cache = opts.get("ssd_cache")
    if cache is not None and not _CACHE_SIZE.fullmatch(cache):
        raise EngineError(f"ds4: invalid value for --ssd-streaming-cache-experts: {cache!r}", 2)
    drafter = os.path.basename(speculation.model or "")
    if (
        speculation.mode == "dspark"
        and _VISION_EXP_MARK in os.path.basename(model_path)
        and "-0731" in drafter
    ):
        raise EngineError(
            f"ds4: the Vision-Exp model refuses the 0731 DSpark drafter '{drafter}': use its own drafter", 1
        )


def load_models(model_path: str, speculation: Speculation) -> None:
    """Check base and draft model files and log what was found, as the engine does while loading."""
    header = open_model(model_path)
    log(f"ds4: model {describe_model(model_path, header)}")
    if speculation.model:
        draft = open_model(speculation.model)
        log(f"ds4: speculative decoding: {speculation.mode} with {describe_model(speculation.model, draft)}")
    elif speculation.mode == "mtp":
        log("ds4: speculative decoding: mtp (built-in)")
    else:
        log(f"ds4: speculative decoding: {speculation.mode}")
    tuning = {
        "dspark": ("DS4_DSPARK_QUENCH", "DS4_DSPARK_MAX_KV"),
        "mtp": ("DS4_CONT_MTP_MODE",),
    }.get(speculation.mode, ())
    settings = [f"{name}={os.environ[name]}" for name in tuning if os.environ.get(name)]
    if settings:
        log(f"ds4: {speculation.mode} settings: {' '.join(settings)}")


def load_family_files(opts: dict) -> None:
    """The vision encoder checked as a GGUF, and what streaming and power the engine runs with, logged."""
    if opts.get("vision"):
        encoder = open_model(opts["vision"])
        log(f"ds4: vision encoder {describe_model(opts['vision'], encoder)}")
    if opts.get("ssd_streaming"):
        log(f"ds4: streaming experts from disk, expert cache {opts.get('ssd_cache') or 'automatic'}")
    if opts.get("power") is not None:
        log(f"ds4: sustained GPU power {opts['power']}%")


def wait_for_load(stopping) -> bool:
    """The stand-in's model load: DS4_STANDIN_LOAD_DELAY seconds, cut short once `stopping()` is true.

    Polls rather than waiting on an Event, because a signal handler must not take a lock the main thread
    may hold. Returns True once loaded, False when asked to stop first.
    """
    deadline = time.monotonic() + max(env_number(LOAD_DELAY_ENV, DEFAULT_LOAD_DELAY_S), 0.0)
    while time.monotonic() < deadline:
        if stopping():
            return False
        time.sleep(min(0.05, max(deadline - time.monotonic(), 0.0)))
    return not stopping()


# --- single instance -----------------------------------------------------------------------------------

_held_locks: list[int] = []


def acquire_engine_lock() -> str:
    """flock on DS4_LOCK_FILE (default /tmp/ds4.lock), held until the process ends; exit 2 if taken."""
    path = os.environ.get("DS4_LOCK_FILE") or DEFAULT_LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as error:
        raise EngineError(f"ds4: cannot open lock file '{path}': {error.strerror}", 2) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        owner = f" by pid {holder}" if holder.isdigit() else ""
        raise EngineError(
            f"ds4: another ds4 engine is running (lock '{path}' held{owner}); refusing to start a second one",
            2,
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held_locks.append(fd)
    return path


# --- answers -------------------------------------------------------------------------------------------

# The stand-in does no inference. Answers come from this tiny fixed table: the first entry whose key is
# in the lower-cased prompt wins. The installer's smoke question is "What is the capital of France?
# Answer in one sentence."
ANSWERS = (("capital of france", "The capital of France is Paris."),)
# Release flavour "wrong-answer" (v0.6.6) ships a broken table, so a smoke test expecting "paris" fails.
WRONG_ANSWERS = (("capital of france", "The capital of France is Lyon."),)
FALLBACK_ANSWER = "I do not know the answer to that question."

# Stand-in only: a prompt containing `[[standin-sleep:SECONDS]]` is answered after that long (drain tests).
SLEEP_MARKER = re.compile(r"\[\[standin-sleep:(\d+(?:\.\d+)?)\]\]")


def split_sleep_marker(prompt: str) -> tuple[str, float]:
    delay = sum(float(match) for match in SLEEP_MARKER.findall(prompt))
    return SLEEP_MARKER.sub("", prompt), delay


# A request to count (the speed measurement's decode) is answered with the numbers asked for, one a line,
# as a model would: "count upward from 1 to N".
COUNT_REQUEST = re.compile(r"count upward from 1 to (\d+)")


def answer_for(prompt: str, flavour: str) -> str:
    table = WRONG_ANSWERS if flavour == "wrong-answer" else ANSWERS
    wanted = " ".join(prompt.lower().split())
    for key, answer in table:
        if key in wanted:
            return answer
    count = COUNT_REQUEST.search(wanted)
    if count:
        return "\n".join(str(n) for n in range(1, min(int(count.group(1)), 100000) + 1))
    return FALLBACK_ANSWER


def count_tokens(text: str) -> int:
    """A word count stands in for the tokenizer."""
    return len(text.split())


# --- speed ---------------------------------------------------------------------------------------------

# Stand-in only: how fast a release "runs", in tokens per second. Faster than a Spark (roughly 10x), so a
# measurement takes about a second, yet slow enough that the pacing below, not this machine's load,
# decides the figures. A flavour may make a release slower, so the fleet's speed gate is tested for real.
PREFILL_TPS = 4000.0
DECODE_TPS = 300.0
SPEED_FACTORS = {  # flavour -> (prefill factor, decode factor)
    "slow-decode": (1.0, 0.5),  # decode at half speed: far beyond the gate's bound, however busy the machine
    "slightly-slower": (0.95, 0.95),  # 5% slower at both: within it
}


# Stand-in only: while the file pace.json exists in DS4_STANDIN_HOLD_DIR (default /run/ds4-standin), it sets
# the speeds instead, read at each request: {"prefill_tps": N, "decode_tps": N, "dspark_decode_tps": N,
# "aggregate_tps": N} (each optional). dspark_decode_tps is the decode of an engine with a DSpark drafter;
# aggregate_tps caps the tokens a second of all the requests decoding at once, shared evenly, as a GPU's
# throughput saturates. The flavour's factors apply on top. A test paces a release at the speed it needs.
PACE_FILE = "pace.json"
_decoding = {"count": 0}
_decoding_lock = threading.Lock()


def pace_settings() -> dict:
    path = os.path.join(os.environ.get("DS4_STANDIN_HOLD_DIR") or "/run/ds4-standin", PACE_FILE)
    try:
        with open(path) as handle:
            settings = json.load(handle)
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


def speeds(flavour: str, speculation: str = "off", pair=None) -> tuple[float, float, float | None]:
    """(prefill, decode, aggregate or None) tokens a second of a release of `flavour`; `pair`, the factors
    of two Sparks in the distributed mode against one (ds4_dist.pair_speeds)."""
    prefill, decode = SPEED_FACTORS.get(flavour, (1.0, 1.0))
    if pair:
        prefill, decode = prefill * pair[0], decode * pair[1]
    settings = pace_settings()
    decode_tps = settings.get("decode_tps", DECODE_TPS)
    if speculation == "dspark":
        decode_tps = settings.get("dspark_decode_tps", decode_tps)
    aggregate = settings.get("aggregate_tps")
    return (
        settings.get("prefill_tps", PREFILL_TPS) * prefill,
        decode_tps * decode,
        None if aggregate is None else aggregate * decode,
    )


class Pace:
    """The time a generation takes: the prompt's prefill, then one token after another. Each step waits for
    its due time on one schedule from the start, so a late wake-up delays that token alone and the figures
    measured from outside stay those of the release. With an aggregate cap, each token's interval follows
    how many requests decode at that moment."""

    def __init__(self, flavour: str, prompt_tokens: int, speculation: str = "off", pair=None):
        self.prefill_tps, self.decode_tps, self.aggregate_tps = speeds(flavour, speculation, pair)
        self.prompt_tokens = prompt_tokens
        self.prefilled_at = None
        self.due = 0.0

    def prefill(self) -> None:
        time.sleep(self.prompt_tokens / self.prefill_tps)
        self.prefilled_at = self.due = time.monotonic()
        with _decoding_lock:
            _decoding["count"] += 1

    def token(self, index: int) -> None:
        """Wait until the `index`-th generated token (from 1) is due."""
        if self.aggregate_tps is None:
            self.due = self.prefilled_at + index / self.decode_tps
        else:
            with _decoding_lock:
                sharing = max(_decoding["count"], 1)
            self.due += 1.0 / min(self.decode_tps, self.aggregate_tps / sharing)
        time.sleep(max(self.due - time.monotonic(), 0.0))

    def done(self) -> None:
        if self.prefilled_at is not None:
            with _decoding_lock:
                _decoding["count"] -= 1
            self.prefilled_at = None


# --- release feed --------------------------------------------------------------------------------------


def fetch_latest(url: str) -> str:
    """The first line of the one-line LATEST feed (http(s):// or file://), within the engine's 3 s."""
    with urllib.request.urlopen(url, timeout=UPDATE_TIMEOUT_S) as response:
        text = response.read(256).decode("utf-8", errors="replace").strip()
    latest = text.splitlines()[0].strip() if text else ""
    parse_version(latest)
    return latest


def update_message(latest: str, running: str) -> str:
    # Faithful to the real engine's known bug: only the first three numbers are compared, so a 4-part
    # release (v0.5.6.1) is never newer than its 3-part base (v0.5.6).
    if parse_version(latest)[:3] > parse_version(running)[:3]:
        return f"update available: {latest} (running {running})"
    return f"latest is {latest} -- up to date"


def update_url() -> str:
    return os.environ.get("DS4_UPDATE_URL") or DEFAULT_UPDATE_URL


def check_update_command(build: Build) -> int:
    """`--check-update`: one line on stdout. Guess: exit 1 with a log line when the feed is unreadable."""
    url = update_url()
    try:
        latest = fetch_latest(url)
    except (OSError, ValueError) as error:
        log(f"{build.program}: update check failed for {url}: {error}")
        return 1
    print(update_message(latest, build.version), flush=True)
    return 0
