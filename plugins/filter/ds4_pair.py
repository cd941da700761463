"""Filters of a pair of Sparks (ds4_pairs); the rules live in module_utils/_pair/declaration.py.

- `ds4_pairs | ds4.fleet.pair_problems(hostvars, ansible_play_hosts_all)` -> every refusal, before any change
- `ds4_pairs | ds4.fleet.pair_hosts` -> the Sparks it names as members
- `ds4_pairs | ds4.fleet.pair_member(inventory_hostname, ...)` -> this Spark's part in its pair, or {}
- `ds4_pairs | ds4.fleet.pair_fit_problem(inventory_hostname, ...)` -> why its model does not fit, or ""
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.ds4.fleet.plugins.module_utils._host.gpu import spark_memory
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import (
    ROLES,
    SAME,
    PairError,
    pair_of,
    pair_split,
    pairs_of,
    play_problems,
    quantization_fit_problem,
)
from ansible_collections.ds4.fleet.plugins.module_utils._pair.mode import TENSOR, mode_of, transport_of
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    quantization_entry,
)


def _member_facts(variables):
    """What a member runs: what it remembered with its roles' defaults (_ds4_pair_compared, set by
    ds4_service's pair_check, with the RDMA device found on its link where its tensor pair asks for rdma),
    else its own variables (hostvars: the inventory's and the run's only); and,
    where the run addresses its link (ds4_pair_link_manage), its interfaces and what each holds."""
    facts = variables.get("ansible_facts") or {}
    addresses = list(facts.get("all_ipv4_addresses") or []) + list(facts.get("all_ipv6_addresses") or [])
    compared = variables.get("_ds4_pair_compared") or variables
    member = {name: compared.get(name) for name, _rule in SAME}
    ctx = compared.get("ds4_ctx")
    member["ds4_ctx"] = int(ctx) if isinstance(ctx, str) and ctx.isdigit() else ctx
    member["addresses"] = addresses
    if "rdma" in compared:
        # What ds4_rdma_link found on a tensor member asking for rdma (None: no device on its link).
        member["rdma"] = compared["rdma"]
    if boolean(compared.get("ds4_pair_link_manage") or False, strict=False):
        member["link"] = {
            "interface": compared.get("ds4_pair_link_interface"),
            "interfaces": {name: _held(facts, name) for name in facts.get("interfaces") or []},
        }
    return member


def _held(facts, interface):
    """The addresses `interface` holds, from the network facts (which write a `-` of its name as `_`)."""
    entry = facts.get(interface) or facts.get(interface.replace("-", "_")) or {}
    ipv4 = [entry.get("ipv4") or {}] + list(entry.get("ipv4_secondaries") or [])
    return [a["address"] for a in ipv4 + list(entry.get("ipv6") or []) if a.get("address")]


def pair_hosts(pairs):
    """The Sparks ds4_pairs names as members, however malformed the rest of it (pair_problems says)."""
    hosts = []
    for pair in pairs.values() if isinstance(pairs, dict) else ():
        for role in ROLES:
            host = (pair.get(role) or {}).get("host") if isinstance(pair, dict) else None
            if isinstance(host, str):
                hosts.append(host)
    return list(dict.fromkeys(hosts))


def pair_problems(pairs, hostvars, in_play, catalog=None):
    """Every refusal of ds4_pairs for this run: the declaration, a member left out of the run, a member's
    address that is not its own (its facts, network subset), members on different builds or models, a
    worker context below the coordinator's, a model the pair's mode does not serve (`catalog`:
    ds4_model_catalog), a tensor member without the RDMA its pair asks for."""
    members = {host: _member_facts(hostvars[host]) for host in pair_hosts(pairs) if host in hostvars}
    return play_problems(pairs, members, list(in_play), catalog)


def pair_member(pairs, host, catalog, generation, quantization, extra=None, port=9400):
    """{pair, role, peer, address, peer_address, port, mode, transport, layers (this member's slice; None in
    tensor mode, where the engine splits every layer)} of `host` in its pair, or {} when it serves alone."""
    try:
        membership = pair_of(pairs_of(pairs), host)
        if membership is None:
            return {}
        name, role, pair = membership
        layers = {role: None}
        if mode_of(pair) != TENSOR:
            _name, entry = quantization_entry(catalog, generation, quantization, extra)
            layers = pair_split(catalog[generation], entry, pair.get("layers"), f"ds4_pairs[{name!r}].layers")
    except (PairError, CatalogError) as exc:
        raise AnsibleFilterError(f"pair_member: {exc}") from exc
    other = "worker" if role == "coordinator" else "coordinator"
    return {
        "pair": name,
        "role": role,
        "peer": pair[other]["host"],
        "address": str(pair[role]["address"]),
        "peer_address": str(pair[other]["address"]),
        "coordinator_address": str(pair["coordinator"]["address"]),
        "worker_address": str(pair["worker"]["address"]),
        "port": pair.get("port") or port,
        "mode": mode_of(pair),
        "transport": transport_of(pair),
        "layers": layers[role],
    }


def pair_fit_problem(
    pairs,
    host,
    catalog,
    generation,
    speculation,
    quantization,
    extra,
    memory_bytes,
    mem_floor_gb,
    meminfo=None,
):
    """Why the model files `host` would serve (its slice's, in its pair) do not fit `memory_bytes` (else the
    MemTotal of `meminfo`, the Spark's /proc/meminfo) less the engine's floor; "" when they fit. The
    preflight's memory judgement, for a play that must refuse before the preflight runs."""
    memory, problem = spark_memory(host, memory_bytes, meminfo)
    if problem:
        return problem
    try:
        return quantization_fit_problem(
            catalog, generation, speculation, quantization, extra, pairs, host, memory,
            int(mem_floor_gb) * 1024**3,
        ) or ""  # fmt: skip
    except (PairError, CatalogError) as exc:
        raise AnsibleFilterError(f"pair_fit_problem: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "pair_problems": pair_problems,
            "pair_member": pair_member,
            "pair_hosts": pair_hosts,
            "pair_fit_problem": pair_fit_problem,
        }
