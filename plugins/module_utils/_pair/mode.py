"""A pair's mode: the engine's pipeline (layer split) or its network tensor parallelism, and what each serves.

Engine contract, "Two Sparks, the faster way": in tensor mode the engine splits every layer across the two
Sparks and talks over their link with RDMA (RoCE v2; `--transport tcp` is the engine's fallback). Both
members hold the COMPLETE file and each maps about half of every layer; the worker runs `ds4` (the CLI),
the coordinator `ds4-server`. The engine serves only some models this way (2026-10: Flash 0731 Q2 and
MXFP4, V4.1 Q2; not GLM, not vision, not `--ssd-streaming`): which is the catalog's to say, per
generation, in `tensor_parallel` (a list of its quantization keys), so that a generation added to the
catalog says it too.

    ds4_pairs:
      pair01:
        coordinator: {host: spark04, address: 10.77.0.1}
        worker: {host: spark05, address: 10.77.0.2}
        mode: tensor          # optional: pipeline (the default) or tensor
        transport: rdma       # optional, tensor only: rdma (the default) or tcp

A pair without `mode` runs the pipeline, as every pair did before the tensor mode existed: the engine
releases before it (the fork's v0.6.x among them) have no tensor mode, and a pair that took it on its next
run without asking would fail to start (docs/pair.md, "Which mode").
"""

from __future__ import annotations

PIPELINE = "pipeline"
TENSOR = "tensor"
MODES = (PIPELINE, TENSOR)
DEFAULT_MODE = PIPELINE
RDMA = "rdma"
TCP = "tcp"
TRANSPORTS = (RDMA, TCP)
DEFAULT_TRANSPORT = RDMA
CATALOG_KEY = "tensor_parallel"

# In tensor mode each member maps half of every layer: the memory fit's shares, in pair_split's shape.
TENSOR_SHARES = {"coordinator_layers": 1, "worker_layers": 1, "layer_count": 2}


def mode_of(pair):
    """The pair's mode: its `mode`, else the default."""
    return pair.get("mode") or DEFAULT_MODE


def transport_of(pair):
    """The transport a tensor pair asks for (its `transport`, else rdma); None for a pipeline pair."""
    if mode_of(pair) != TENSOR:
        return None
    return pair.get("transport") or DEFAULT_TRANSPORT


def shape_problems(at, pair):
    """Refusals of the mode's keys of one pair of ds4_pairs (`at` names it)."""
    out = []
    mode = pair.get("mode")
    if mode is not None and mode not in MODES:
        out.append(f"{at}.mode must be pipeline or tensor, got {mode!r}")
        return out
    transport = pair.get("transport")
    if transport is not None and mode_of(pair) != TENSOR:
        out.append(
            f"{at}.transport is the tensor mode's (rdma or tcp); a pipeline pair talks plain TCP: "
            f"leave it out or set {at}.mode to tensor"
        )
    elif transport is not None and transport not in TRANSPORTS:
        out.append(f"{at}.transport must be rdma or tcp, got {transport!r}")
    if mode_of(pair) == TENSOR and pair.get("layers") is not None:
        out.append(
            f"{at}.layers is the pipeline's split; in tensor mode the engine splits every layer across "
            "both Sparks: leave it out"
        )
    return out


def tensor_quantizations(catalog, generation):
    """The quantization keys of `generation` the engine serves in tensor mode (the catalog's list)."""
    spec = (catalog or {}).get(generation) or {}
    listed = spec.get(CATALOG_KEY) or []
    if not isinstance(listed, list) or not all(isinstance(key, str) for key in listed):
        raise ValueError(
            f"ds4_model_catalog[{generation!r}].{CATALOG_KEY} must be a list of its quantization keys, "
            f"got {listed!r}"
        )
    return listed


def model_problem(at, pair, catalog, generation, quantization):
    """Why the pair's model cannot be served in its mode, or None: tensor mode only where the catalog lists
    the generation's quantization."""
    if mode_of(pair) != TENSOR or catalog is None:
        return None
    try:
        supported = tensor_quantizations(catalog, generation)
    except ValueError as exc:
        return f"{at}.mode tensor: {exc}"
    if quantization in supported:
        return None
    served = ", ".join(supported) or "none"
    return (
        f"{at}.mode tensor: the engine's tensor-parallel mode does not serve ds4_model_generation "
        f"{generation!r} with ds4_quantization {quantization!r} (of this generation it serves: {served}; "
        f"ds4_model_catalog[{generation!r}].{CATALOG_KEY}); declare the pair's mode pipeline, or pick a "
        "quantization it serves"
    )


def rdma_problem(at, role, host, address, found):
    """Why a tensor member asking for rdma cannot have it, or None.

    `found`: what _spark.rdma found on the member for its link address ({"device", "port", "gid_index"}),
    or None when no RDMA device serves that address."""
    if found:
        return None
    return (
        f"{at}.transport rdma: {role} {host} has no RDMA device serving its link address {address} "
        "(no RoCE v2 GID of /sys/class/infiniband holds it): cable the ConnectX-7 port and load its driver, "
        f"or set {at}.transport to tcp"
    )
