"""Two Sparks as one endpoint (the engine's distributed mode): the pair's declaration, its layer split, and
whether a quantization fits one Spark's memory or a pair's.

Pure functions, judged before anything on a host changes. A pair is declared once, in `ds4_pairs`
(inventory group_vars):

    ds4_pairs:
      pair01:
        coordinator: {host: spark04, address: 10.77.0.1}   # address: the Spark's own, on the pair's link
        worker: {host: spark05, address: 10.77.0.2}
        port: 9100                     # optional: the coordinator's --listen port (ds4_pair_port)
        layers: "0:20"                 # optional: the coordinator's slice (else the catalog's)
        mode: pipeline                 # optional: pipeline or tensor (_pair.mode)

The engine's protocol (engine contract, "Quantizations and two Sparks as one endpoint"): the coordinator
listens on the link (`--role coordinator --layers 0:K --listen ADDR PORT`) and serves the HTTP API; the
worker (`--role worker --layers K+1:output --coordinator ADDR PORT`) is started first and waits for it.
Both hold the same GGUF and must be built from the same commit; the worker's context must be at least the
coordinator's. Plain TCP, no authentication: the port is kept for the worker's address by the firewall.
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import describe_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._pair.fleet import ROLES, left_out
from ansible_collections.ds4.fleet.plugins.module_utils._pair.link import interface_problems
from ansible_collections.ds4.fleet.plugins.module_utils._pair.mode import (
    TENSOR,
    TENSOR_SHARES,
    mode_of,
    model_problem,
    rdma_problem,
    shape_problems,
    transport_of,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    model_files,
    quantizations_of,
    serving,
)

PAIRS_VAR = "ds4_pairs"
QUANTIZATION_VAR = "ds4_quantization"
_PAIR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_SLICE = re.compile(r"([0-9]+):([0-9]+|output)")
GIB = 1024**3


class PairError(ValueError):
    """A pair declaration or split that cannot serve; each message names the variable and the value."""

    def __init__(self, errors):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))


# --- the layer split ------------------------------------------------------------------------------------


def parse_slice(text, layer_count):
    """`A:B` (B a layer or `output`) -> (first, last) layers, both within the model's `layer_count`."""
    match = _SLICE.fullmatch(str(text))
    if not match:
        raise PairError(f"a layer slice is A:B (B a layer number or output), got {text!r}")
    first = int(match.group(1))
    last = layer_count - 1 if match.group(2) == "output" else int(match.group(2))
    if first > last or last >= layer_count:
        raise PairError(
            f"layer slice {text!r} is not within the model's {layer_count} layers (0 to {layer_count - 1})"
        )
    return first, last


def split(coordinator_slice, layer_count):
    """The pair's slices in the forward topology: the coordinator 0:K, the worker K+1:output.

    The coordinator owns layer 0 and the slice before the worker's (a coordinator without the layers before
    the worker's crashes the engine, its issue #610); the worker must keep at least one layer."""
    first, last = parse_slice(coordinator_slice, layer_count)
    if first != 0:
        raise PairError(
            f"the coordinator's slice must start at layer 0 (the forward topology), got {coordinator_slice!r}"
        )
    if last >= layer_count - 1:
        raise PairError(
            f"the coordinator's slice {coordinator_slice!r} leaves the worker no layer of the model's "
            f"{layer_count}"
        )
    return {"coordinator": f"0:{last}", "worker": f"{last + 1}:output", "coordinator_layers": last + 1,
            "worker_layers": layer_count - last - 1, "layer_count": layer_count}  # fmt: skip


def pair_split(spec, quantization_entry, setting=None, where=PAIRS_VAR):
    """The split of a pair: `setting` (the pair's `layers`) or else the quantization's published one, checked
    against the generation's layer count (`spec` is the catalog's generation)."""
    layer_count = spec.get("layers")
    if not layer_count:
        raise PairError("the catalog's generation gives no layer count (ds4_model_catalog[...].layers)")
    chosen = setting or quantization_entry.get("pair_layers") or f"0:{layer_count // 2 - 1}"
    try:
        return split(chosen, layer_count)
    except PairError as exc:
        raise PairError(f"{where}: {exc}") from None


# --- memory ---------------------------------------------------------------------------------------------


def memory_need(files, role=None, layers=None):
    """Bytes a Spark maps of `files` (ds4.fleet.model_files entries with `bytes` or `size`): all of them on a
    single Spark; on a pair, the base's share of the member's layers (the engine maps only its slice), and
    the other files (a drafter) on the coordinator alone, which decodes."""
    total = 0
    for entry in files:
        size = entry.get("bytes") or entry.get("size") or entry.get("approx_bytes") or 0
        if entry["role"] == "base" and role is not None:
            share = layers[f"{role}_layers"] / layers["layer_count"]
            total += int(size * share)
        elif role in (None, "coordinator"):
            total += size
    return total


def fit_problem(host, files, memory_bytes, floor_bytes, role=None, layers=None):
    """None when `files` fit the Spark's memory less the engine's floor; else why, naming the pair setting
    that would serve a quantization one Spark cannot hold."""
    if not memory_bytes:
        return None
    need = memory_need(files, role, layers)
    room = memory_bytes - floor_bytes
    if need <= room:
        return None
    quant = files[0].get("quantization", "?")
    if role is None:
        return (
            f"{QUANTIZATION_VAR} {quant!r} needs {describe_bytes(need)} of memory and {host} has "
            f"{describe_bytes(room)} for it ({describe_bytes(memory_bytes)} less the engine's floor): "
            "one Spark "
            f"cannot hold it; declare {host} in a pair ({PAIRS_VAR}) so that two Sparks serve it, each its "
            f"slice of the layers"
        )
    if layers is TENSOR_SHARES:
        return (
            f"{QUANTIZATION_VAR} {quant!r} needs {describe_bytes(need)} on the {role} {host} in tensor mode "
            f"(half of every layer) and it has {describe_bytes(room)}: pick a smaller quantization, or "
            f"declare the pair's mode pipeline ({PAIRS_VAR}[...].mode)"
        )
    return (
        f"{QUANTIZATION_VAR} {quant!r} needs {describe_bytes(need)} on the {role} {host} (its slice "
        f"{layers[role]}) and it has {describe_bytes(room)}: move the split ({PAIRS_VAR}[...].layers)"
    )


def tensor_member(pairs, host):
    """Whether `host` is a member of a pair in the engine's tensor mode (ds4_pairs): it holds its half of
    every layer in memory, a streamed family's too, as the tensor mode does not stream."""
    membership = pair_of(pairs_of(pairs), host)
    return membership is not None and mode_of(membership[2]) == TENSOR


def quantization_fit_problem(
    catalog, generation, speculation, quantization, extra, pairs, host, memory_bytes, floor_bytes
):
    """fit_problem of the files `host` would serve (its slice's, in a pair of `pairs`), judged from the
    catalog's sizes, exact or published approximately; None without a catalog or a memory figure."""
    if catalog is None or not memory_bytes:
        return None
    files = model_files(catalog, generation, speculation, quantization, extra)
    membership = pair_of(pairs_of(pairs), host)
    if serving(catalog, generation)["streamed"] and not tensor_member(pairs, host):
        # Its experts stay on disk: _host.model_fit fits its resident part and cache instead. The tensor
        # mode does not stream (engine contract): there each member holds its half of every layer.
        return None
    entry = quantizations_of(catalog, generation, extra)[files[0]["quantization"]]
    files[0]["bytes"] = files[0]["size"] or entry["bytes"]
    role, layers = None, None
    if membership is not None:
        name, role, pair = membership
        if mode_of(pair) == TENSOR:
            layers = TENSOR_SHARES
        else:
            layers = pair_split(
                catalog[generation], entry, pair.get("layers"), f"{PAIRS_VAR}[{name!r}].layers"
            )
    return fit_problem(host, files, memory_bytes, floor_bytes, role, layers)


# --- the declaration ------------------------------------------------------------------------------------


def _address_problem(value):
    try:
        address = ipaddress.ip_address(str(value))
    except ValueError:
        return "an IP address"
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        return "an address of the Spark's own on the pair's link (not loopback, a wildcard or multicast)"
    return None


def pairs_of(pairs):
    """Validate the shape of ds4_pairs; return {name: {"coordinator": {host, address}, "worker": ..., ...}}.
    Refuses a pair of one, a Spark in two pairs (or twice in one) and addresses that are not addresses."""
    if pairs in (None, {}):
        return {}
    if not isinstance(pairs, dict):
        raise PairError(f"{PAIRS_VAR} must be a mapping of pair name to its members, got {pairs!r}")
    member_of = {}
    errors = []
    for name, pair in pairs.items():
        at = f"{PAIRS_VAR}[{name!r}]"
        if not isinstance(name, str) or not _PAIR_NAME.fullmatch(name):
            errors.append(
                f"{PAIRS_VAR} has pair name {name!r}: letters, digits, _ and - (it names a unit and a row)"
            )
            continue
        if not isinstance(pair, dict):
            errors.append(f"{at} must be a mapping with coordinator and worker, got {pair!r}")
            continue
        unknown = sorted(set(pair) - {"coordinator", "worker", "port", "layers", "mode", "transport"})
        if unknown:
            errors.append(
                f"{at} has unknown keys {unknown}: coordinator, worker, port, layers, mode, transport"
            )
        errors += shape_problems(at, pair)
        hosts = []
        for role in ROLES:
            member = pair.get(role)
            if not isinstance(member, dict) or not member.get("host"):
                errors.append(
                    f"{at}.{role} is missing: a pair is two Sparks, a coordinator and a worker, each "
                    "{host: NAME, address: ITS LINK ADDRESS}"
                )
                continue
            problem = _address_problem(member.get("address"))
            if problem:
                errors.append(f"{at}.{role}.address must be {problem}; got {member.get('address')!r}")
            hosts.append(member["host"])
        if len(hosts) == 2 and hosts[0] == hosts[1]:
            errors.append(f"{at} names {hosts[0]} as both coordinator and worker: a pair of one Spark")
            continue
        for host in hosts:
            if host in member_of:
                errors.append(
                    f"{PAIRS_VAR} puts {host} in two pairs, {member_of[host]!r} and {name!r}: a Spark "
                    "serves one pair"
                )
            member_of.setdefault(host, name)
        port = pair.get("port")
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            errors.append(f"{at}.port must be a port number from 1 to 65535, got {port!r}")
        addresses = [pair[r].get("address") for r in ROLES if isinstance(pair.get(r), dict)]
        if len(addresses) == 2 and addresses[0] == addresses[1] and addresses[0] is not None:
            errors.append(f"{at}: coordinator and worker both give the address {addresses[0]}")
    if errors:
        raise PairError(errors)
    return pairs


def pair_of(pairs, host):
    """(pair name, role, pair) of `host`, or None when it serves alone."""
    for name, pair in (pairs or {}).items():
        for role in ROLES:
            if pair[role]["host"] == host:
                return name, role, pair
    return None


# What must be the same on both members: the protocol is not release-stable and both hold the same GGUF.
SAME = (
    ("ds4_release", "release"),
    ("ds4_release_commit", "commit"),
    ("ds4_model_generation", "model generation"),
    ("ds4_quantization", "quantization"),
)


def member_problems(name, pair, members, catalog=None):
    """Refusals of one pair against what its members' variables and facts say, before any change.

    `members` maps each member's host to {"addresses": [its own addresses, from its facts], "ds4_release",
    "ds4_release_commit", "ds4_model_generation", "ds4_quantization", "ds4_ctx"}, and "link": {"interface",
    "interfaces": {name: [its addresses]}} for a member whose link the run addresses (ds4_pair_link_manage):
    its netplan file is written once the pair is judged, so the address need not be its own yet, but the
    interface must be, free of that address elsewhere; and "rdma": what _spark.rdma found for its link
    address (None: nothing), where the run looked. `catalog` (ds4_model_catalog) says which models the
    pair's mode serves."""
    at = f"{PAIRS_VAR}[{name!r}]"
    out = []
    coordinator, worker = pair["coordinator"]["host"], pair["worker"]["host"]
    for role in ROLES:
        host, address = pair[role]["host"], str(pair[role]["address"])
        if host not in members:
            out.append(f"{at}.{role}.host {host} is not a host of this inventory's Sparks")
            continue
        link = members[host].get("link")
        if link:
            out += interface_problems(name, role, host, link["interface"], address, link["interfaces"])
            continue
        own = [str(a) for a in members[host].get("addresses") or []]
        if address not in own:
            # Link-local addresses are never a pair's: left out of the message, as are any beyond eight.
            shown = [a for a in own if not a.lower().startswith("fe80:")]
            shown = ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "")
            out.append(
                f"{at}.{role}.address {address} is not an address of {host} "
                f"(its own: {shown or 'none read'}): "
                "cable and address the link first, or correct the declaration"
            )
    if coordinator not in members or worker not in members:
        return out
    for variable, what in SAME:
        one, other = members[coordinator].get(variable), members[worker].get(variable)
        if one != other:
            out.append(
                f"{at}: the members differ in {what} "
                f"({variable}: {coordinator} {one!r}, {worker} {other!r}); "
                "both must run the same build of the same model"
            )
    problem = model_problem(
        at,
        pair,
        catalog,
        members[coordinator].get("ds4_model_generation"),
        members[coordinator].get("ds4_quantization"),
    )
    if problem:
        out.append(problem)
    if transport_of(pair) == "rdma":
        for role in ROLES:
            host = pair[role]["host"]
            if "rdma" in members[host]:
                problem = rdma_problem(at, role, host, pair[role]["address"], members[host]["rdma"])
                out += [problem] if problem else []
    ctx_c, ctx_w = members[coordinator].get("ds4_ctx"), members[worker].get("ds4_ctx")
    if isinstance(ctx_c, int) and isinstance(ctx_w, int) and ctx_w < ctx_c:
        out.append(
            f"{at}: the worker {worker} has ds4_ctx {ctx_w}, below the coordinator {coordinator}'s "
            "allocation "
            f"{ctx_c}; the engine rejects it at registration"
        )
    return out


def play_problems(pairs, members, in_play, catalog=None):
    """Every refusal of ds4_pairs for a run on the hosts `in_play`: the declaration's, then, for each pair
    with a member in the run, a member left out of it and what its members' variables and facts say
    (`members`: member_problems's mapping, for the Sparks of the inventory; `catalog` ds4_model_catalog)."""
    try:
        declared = pairs_of(pairs)
    except PairError as exc:
        return exc.errors
    out = left_out(declared, in_play, "provisioned")
    for name, pair in declared.items():
        if all(pair[role]["host"] in in_play for role in ROLES):
            out += member_problems(name, pair, members, catalog)
    return out
