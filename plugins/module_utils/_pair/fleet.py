"""A pair of Sparks (ds4_pairs) on day two: the fleet playbooks treat it as one unit.

Pure functions of plain data, on the controller; the declaration itself is judged by ds4_pair.pairs_of
(provision.yml refuses a wrong one before any change). Here a declaration is only read, however
malformed: a pair without both members named is no pair to these rules.

- `pair_of_host(pairs, host)`: (name, coordinator, worker) of the Spark's pair, or None. (A Spark's own
  part, for the roles, is ds4_common's `_ds4_pair`, from the filter pair_member.)
- `units(hosts, pairs)`: `hosts` as the units the upgrade counts, a pair's members together (coordinator
  first) where the first of them stands, every other Spark alone.
- `gateway_backends(hosts, pairs)`: the servers of the gateway's backend: single Sparks and coordinators.
  A worker has no HTTP API; the pair answers through its coordinator.
- `left_out(pairs, in_play, verb)`: a pair with one member in the run and not the other.
- `removal_problems(host, removing, pairs, alone)`: why one member may not be removed without the other.
"""

from __future__ import annotations

from typing import Any

ROLES = ("coordinator", "worker")
ALONE_VAR = "ds4_remove_pair_member_alone"


def _members(pairs: Any) -> list:
    """[(name, coordinator, worker)] of each pair that names both members."""
    out = []
    for name, pair in pairs.items() if isinstance(pairs, dict) else ():
        if not isinstance(pair, dict):
            continue
        hosts = [
            (pair.get(role) or {}).get("host") if isinstance(pair.get(role), dict) else None for role in ROLES
        ]
        if all(isinstance(host, str) and host for host in hosts) and hosts[0] != hosts[1]:
            out.append((name, hosts[0], hosts[1]))
    return out


def pair_of_host(pairs: Any, host: Any) -> tuple | None:
    """(name, coordinator, worker) of `host`'s pair, or None."""
    for member in _members(pairs):
        if host in member[1:]:
            return member
    return None


def units(hosts: Any, pairs: Any) -> list:
    """`hosts` (in order) as units: a pair's members of `hosts` one unit, coordinator first, where the first
    of them stands; every other Spark a unit of its own."""
    hosts = list(hosts)
    taken: set = set()
    out = []
    for host in hosts:
        if host in taken:
            continue
        pair = pair_of_host(pairs, host)
        unit = [member for member in pair[1:] if member in hosts] if pair else [host]
        taken.update(unit)
        out.append(unit)
    return out


def unit_name(unit: list, pairs: Any) -> str:
    """How a message names a unit: the Spark, or the pair with its members (`pair01 (spark04+spark05)`)."""
    pair = pair_of_host(pairs, unit[0])
    if pair is None:
        return unit[0]
    return f"{pair[0]} ({'+'.join(unit)})"


def gateway_backends(hosts: Any, pairs: Any) -> list:
    """The gateway's servers among `hosts`: single Sparks and the coordinators of pairs, never a worker."""
    workers = {worker for _name, _coordinator, worker in _members(pairs)}
    return [host for host in hosts if host not in workers]


def left_out(pairs: Any, in_play: Any, verb: str = "provisioned") -> list:
    """A line for each pair with one member in `in_play` and not the other: a pair is `verb` as one."""
    in_play = set(in_play)
    out = []
    for name, coordinator, worker in _members(pairs):
        hosts = [coordinator, worker]
        taking_part = [host for host in hosts if host in in_play]
        if len(taking_part) == 1:
            missing = next(host for host in hosts if host not in in_play)
            out.append(
                f"ds4_pairs[{name!r}]: this run takes {taking_part[0]} without {missing}; a pair is {verb} "
                f"as one (limit the run to both members, -l {','.join(hosts)})"
            )
    return out


def removal_problems(host: Any, removing: Any, pairs: Any, alone: Any = False) -> list:
    """Why `host` may not be removed in a run on `removing`: it is a member of a pair whose other member
    stays, which would leave that one serving nothing (a worker without its coordinator, a coordinator
    whose route never completes). None when both go, or when the operator said so
    (`ds4_remove_pair_member_alone`)."""
    pair = pair_of_host(pairs, host)
    if pair is None or alone is True:
        return []
    name, coordinator, worker = pair
    other = worker if host == coordinator else coordinator
    if other in set(removing):
        return []
    role = "coordinator" if host == coordinator else "worker"
    return [
        f"{host} is the {role} of the pair {name} and its other member {other} is not in this run: "
        f"removing one member leaves the pair unable to serve. Remove both (-l {coordinator},{worker}), "
        f"or this one alone with -e {ALONE_VAR}=true."
    ]
