"""STAND-IN for the ds4 engine's tensor-parallel mode (two hosts split every layer): test infrastructure of
ds4-fleet, NOT the real engine. Linked into every program beside ds4_common and ds4_dist; its flags exist on
upstream's builds alone (the fork's v0.6.x has no tensor mode, so there they are unknown options).

What the engine contract says ("Two Sparks, the faster way"), followed: the worker is `ds4`, the CLI
(`ds4 --cuda -m MODEL --tensor-parallel --role worker --coordinator IP PORT --transport rdma`), the
coordinator `ds4-server ... --tensor-parallel --role coordinator --listen IP PORT --transport rdma` with
`--batched-session 8`; both built from the same commit and holding the COMPLETE GGUF; `--rdma-device` and
`--rdma-gid-index` where the choice is ambiguous; `--transport tcp` the fallback; "Flash 0731 Q2 and MXFP4
with DSpark" supported. Paced at the published figures: 0731 Q2 decode 26.0 tok/s against one Spark's 20.0,
with DSpark 44.0 (the prose figure) against one Spark's 27.7, prefill 618 @32k against ~860.

The RDMA device is read as libibverbs finds it, under DS4_STANDIN_SYSFS (default /sys) and DS4_STANDIN_DEV
(default /dev), so that a test and the sandbox give a fake one: `class/infiniband/DEV/ports/P/gids/N` with
`gid_attrs/types/N`, and the verbs node `infiniband/uverbsK` that `class/infiniband_verbs/uverbsK/ibdev`
names, opened read-write for the life of the program (where a unit's device policy does not allow it,
the open fails, as the real engine's would).

Guesses where the contract is silent: rdma when --transport is not given; the stand-in's CLI is the worker
alone and its server the coordinator alone; a GGUF "complete" when its file holds every tensor's data (a
pipeline member, which maps its slice alone, is not asked); the coordinator compares the release, the file
name and size and the transport where the real engine compares its commit; several devices or RoCE v2 GIDs
without the flag that picks one exit 2; a GID index that is not a RoCE v2 GID of the device exits 1; over
TCP the pair runs at half its RDMA figures; DSpark is the coordinator's alone: it drafts and samples, the
worker computes its half of every layer for whatever tokens the coordinator sends, so the worker refuses the
speculation flags (the contract's worker command line has none, and the drafter, like the API, is the
serving side's); the wording of every log line and refusal.
"""

import ipaddress
import os
import signal

import ds4_common as common
import ds4_dist as dist
from ds4_common import Option

PROTOCOL = "ds4-tensor-standin/1"
TRANSPORTS = ("rdma", "tcp")
DEFAULT_TRANSPORT = "rdma"
SYSFS_ENV = "DS4_STANDIN_SYSFS"
DEV_ENV = "DS4_STANDIN_DEV"
ROCE_V2 = "RoCE v2"
# The published tensor figures against one Spark's (engine contract): decode 26.0 against 20.0 tok/s,
# prefill 618 @32k against 833-884. Guess: over TCP, half of each.
RDMA_SPEEDS = (618.0 / 860.0, 26.0 / 20.0)
# With DSpark (the coordinator's drafter): 44.0 tok/s decode against one Spark's DSpark 27.7.
RDMA_DSPARK_DECODE = 44.0 / 27.7
TCP_SLOWDOWN = 0.5
# GGUF tensor types: (elements per block, bytes per block), enough to find where a file's tensors end.
_GGML_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2),
}  # fmt: skip
GGUF_DEFAULT_ALIGNMENT = 32

_held_devices: list[int] = []


def options(build: common.Build) -> list[Option]:
    """The tensor mode's flags, on upstream's programs alone."""
    if not build.upstream:
        return []
    return [
        Option(("--tensor-parallel",), "tensor_parallel", "flag", "split every layer across two hosts"),
        Option(("--transport",), "transport", "str", "tensor parallel: rdma (default) or tcp", "KIND"),
        Option(("--rdma-device",), "rdma_device", "str", "rdma: the device, where there are several", "DEV"),
        Option(("--rdma-gid-index",), "rdma_gid_index", "int", "rdma: the RoCE v2 GID index", "N"),
    ]


def server_options(build: common.Build) -> list[Option]:
    if not build.upstream:
        return []
    return [Option(("--batched-session",), "batched_session", "int", "sessions decoded together", "N")]


# The speculation flags, which a tensor worker refuses: the coordinator drafts.
SPECULATION_FLAGS = (("--dspark", "dspark"), ("--mtp-model", "mtp_model"), ("--mtp", "mtp"))


def check_options(opts: dict, program: str) -> None:
    """The tensor flags go together: a role, its peer, no slice, a transport; the worker is the CLI."""
    rdma_flags = opts.get("rdma_device") is not None or opts.get("rdma_gid_index") is not None
    if not opts.get("tensor_parallel"):
        if opts.get("transport") is not None or rdma_flags:
            raise common.EngineError(
                "ds4: --transport, --rdma-device and --rdma-gid-index need --tensor-parallel", 2
            )
        return
    role = opts.get("role")
    if role not in dist.ROLES:
        raise common.EngineError("ds4: --tensor-parallel needs --role worker or --role coordinator", 2)
    if opts.get("layers"):
        raise common.EngineError("ds4: --tensor-parallel splits every layer: no --layers", 2)
    if role == "worker":
        if not opts.get("coordinator") or opts.get("listen"):
            raise common.EngineError("ds4: --role worker needs --coordinator HOST PORT (and no --listen)", 2)
        if program != "ds4":
            raise common.EngineError("ds4: the tensor-parallel worker is ds4, the command line", 2)
        speculating = [flag for flag, key in SPECULATION_FLAGS if opts.get(key)]
        if speculating:
            raise common.EngineError(
                f"ds4: the tensor-parallel worker takes no {', '.join(speculating)}: speculation is the "
                "coordinator's (give it to ds4-server --role coordinator)",
                2,
            )
    else:
        if not opts.get("listen") or opts.get("coordinator"):
            raise common.EngineError(
                "ds4: --role coordinator needs --listen HOST PORT (and no --coordinator)", 2
            )
        if program != "ds4-server":
            raise common.EngineError("ds4: the stand-in's tensor-parallel coordinator is ds4-server", 2)
    transport = opts.get("transport") or DEFAULT_TRANSPORT
    if transport not in TRANSPORTS:
        raise common.EngineError(f"ds4: invalid --transport {transport!r}: rdma or tcp", 2)
    if transport == "tcp" and rdma_flags:
        raise common.EngineError("ds4: --rdma-device and --rdma-gid-index need --transport rdma", 2)


def tensors_end(path: str) -> int:
    """Where the file's last tensor's data ends, as its header and tensor infos say."""
    with open(path, "rb") as stream:
        reader = common._Reader(stream, os.fstat(stream.fileno()).st_size)
        reader.take(4)
        reader.scalar("<I")
        tensor_count = reader.scalar("<Q")
        metadata = {}
        for _ in range(reader.scalar("<Q")):
            key = reader.string()
            metadata[key] = reader.value(reader.scalar("<I"))
        end = 0
        for _ in range(tensor_count):
            reader.string()
            elements = 1
            for _ in range(reader.scalar("<I")):
                elements *= reader.scalar("<Q")
            per_block, block_bytes = _GGML_BLOCKS.get(reader.scalar("<I"), (1, 0))
            offset = reader.scalar("<Q")
            end = max(end, offset + elements // per_block * block_bytes)
        alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        start = -(-stream.tell() // alignment) * alignment
        return start + end


def check_complete(path: str) -> None:
    """Both members of a tensor pair hold the complete GGUF: refuse a copy that ends before its tensors."""
    try:
        end = tensors_end(path)
    except (OSError, common.GGUFCorrupt) as error:
        raise common.EngineError(f"ds4: GGUF file '{path}' is invalid: {error}") from None
    size = os.path.getsize(path)
    if size < end:
        raise common.EngineError(
            f"ds4: tensor parallel needs the complete GGUF on each host: '{path}' holds {size} bytes, its "
            f"tensors end at {end}"
        )


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _entries(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _is_roce_v2(port_dir: str, index: str) -> bool:
    try:
        gid = ipaddress.IPv6Address(_read(os.path.join(port_dir, "gids", index)) or "")
    except ValueError:
        return False
    kind = _read(os.path.join(port_dir, "gid_attrs", "types", index))
    return gid != ipaddress.IPv6Address(0) and kind == ROCE_V2


def open_rdma(opts: dict) -> str:
    """The device and RoCE v2 GID index this host talks over, checked against its sysfs, and its verbs
    node opened and held: what the engine logs."""
    sysfs = os.environ.get(SYSFS_ENV) or "/sys"
    dev = os.environ.get(DEV_ENV) or "/dev"
    base = os.path.join(sysfs, "class", "infiniband")
    devices = _entries(base)
    name = opts.get("rdma_device")
    if name is None:
        if not devices:
            raise common.EngineError(f"ds4: rdma: no RDMA device under {base}: use --transport tcp")
        if len(devices) > 1:
            raise common.EngineError(
                f"ds4: rdma: {len(devices)} RDMA devices ({', '.join(devices)}): give --rdma-device", 2
            )
        name = devices[0]
    elif name not in devices:
        raise common.EngineError(f"ds4: rdma: no RDMA device {name} under {base}")
    ports = [port for port in _entries(os.path.join(base, name, "ports")) if port.isdigit()]
    port = ports[0] if ports else "1"
    port_dir = os.path.join(base, name, "ports", port)
    found = sorted(
        (int(index) for index in _entries(os.path.join(port_dir, "gids")) if index.isdigit()
         and _is_roce_v2(port_dir, index)),
    )  # fmt: skip
    index = opts.get("rdma_gid_index")
    if index is None:
        if not found:
            raise common.EngineError(f"ds4: rdma: {name} port {port} has no RoCE v2 GID")
        if len(found) > 1:
            listed = ", ".join(str(each) for each in found)
            raise common.EngineError(
                f"ds4: rdma: {name} port {port} has {len(found)} RoCE v2 GIDs ({listed}): "
                "give --rdma-gid-index",
                2,
            )
        index = found[0]
    elif index not in found:
        raise common.EngineError(f"ds4: rdma: GID index {index} of {name} port {port} is not a RoCE v2 GID")
    verbs = os.path.join(sysfs, "class", "infiniband_verbs")
    nodes = [each for each in _entries(verbs) if _read(os.path.join(verbs, each, "ibdev")) == name]
    if not nodes:
        raise common.EngineError(f"ds4: rdma: {name} has no verbs device under {verbs}")
    node = os.path.join(dev, "infiniband", nodes[0])
    try:
        _held_devices.append(os.open(node, os.O_RDWR))
    except OSError as error:
        raise common.EngineError(
            f"ds4: rdma: cannot open the verbs device {node}: {error.strerror}"
        ) from None
    return f"rdma on {name} port {port}, RoCE v2 GID index {index} ({node})"


def prepare(opts: dict, model_path: str) -> dict:
    """What either member checks before it loads: the complete file and its transport. Returns the link's
    description for the route: {"transport", "size"}."""
    check_complete(model_path)
    transport = opts.get("transport") or DEFAULT_TRANSPORT
    described = open_rdma(opts) if transport == "rdma" else "tcp"
    common.log(f"ds4: tensor: transport {described}")
    return {"transport": transport, "size": os.path.getsize(model_path)}


def speeds(transport: str, speculation: str = "off") -> tuple[float, float]:
    """Prefill and decode factors of a tensor pair against one Spark with the same speculation."""
    prefill, decode = RDMA_SPEEDS
    if speculation == "dspark":
        decode = RDMA_DSPARK_DECODE
    if transport == "tcp":
        return prefill * TCP_SLOWDOWN, decode * TCP_SLOWDOWN
    return prefill, decode


def hello(build: common.Build, context: int, model_path: str, link: dict) -> dict:
    return {
        "hello": PROTOCOL,
        "version": build.version,
        "flavour": build.flavour,
        "ctx": context,
        "model": os.path.basename(model_path),
        "size": link["size"],
        "transport": link["transport"],
    }


class Route(dist.Route):
    """The tensor coordinator's route: one worker holding the other half of every layer."""

    def __init__(self, build: common.Build, context: int, model_path: str, link: dict, speculation: str):
        super().__init__(build, None, context, model_path)
        self.link = link
        self.speculation = speculation

    def what(self) -> str:
        return f"tensor-parallel coordinator over {self.link['transport']}"

    def registered(self, hello: dict) -> str:
        return "tensor parallel"

    def speeds(self) -> tuple[float, float]:
        return speeds(self.link["transport"], self.speculation)

    def _judge(self, hello: dict) -> None:
        if hello.get("hello") != PROTOCOL:
            raise dist.Refused(f"not a ds4 tensor-parallel worker (protocol {hello.get('hello')!r})")
        if (hello.get("version"), hello.get("flavour")) != (self.build.version, self.build.flavour):
            raise dist.Refused(
                f"worker built from {hello.get('version')} ({hello.get('flavour')}), coordinator from "
                f"{self.build.version} ({self.build.flavour}): both sides must be built from the same commit"
            )
        if (hello.get("model"), hello.get("size")) != (self.model, self.link["size"]):
            raise dist.Refused(
                f"worker holds {hello.get('model')!r} ({hello.get('size')} bytes), coordinator "
                f"{self.model!r} ({self.link['size']} bytes): the same complete GGUF on both"
            )
        if hello.get("transport") != self.link["transport"]:
            raise dist.Refused(
                f"worker transport {hello.get('transport')}, coordinator {self.link['transport']}: "
                "both sides the same transport"
            )
        if not isinstance(hello.get("ctx"), int) or hello["ctx"] < self.context:
            raise dist.Refused(
                f"worker context {hello.get('ctx')} is below the coordinator's allocation {self.context}"
            )
        if self.worker is not None:
            raise dist.Refused("the route is complete: a worker is already registered")


def run_worker(build: common.Build, opts: dict) -> int:
    """`ds4 --tensor-parallel --role worker`: the model's checks and lock, the complete file and the
    transport, the load, then the route until a stop is asked (SIGTERM or SIGINT: exit 0)."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    model_path = common.resolve_model_path(opts["model"])
    speculation = common.choose_speculation(opts)
    common.acquire_engine_lock()
    common.load_models(model_path, speculation)
    link = prepare(opts, model_path)
    context = opts["ctx"] or build.default_context
    if not common.wait_for_load(lambda: bool(stopping)):
        common.log(f"{build.program}: shutdown requested while loading")
        return 0
    return dist.run_worker(
        build, opts, context, model_path, lambda: bool(stopping),
        hello=hello(build, context, model_path, link),
        what=f"tensor-parallel worker over {link['transport']}",
    )  # fmt: skip
