"""Filters of a pair of Sparks (ds4_pairs) on day two; the rules live in module_utils/_pair/fleet.py.

- `hosts | ds4.fleet.gateway_backends(ds4_pairs)` -> the gateway's servers: single Sparks and coordinators
- `ds4_pairs | ds4.fleet.pair_left_out(ansible_play_hosts_all, verb)` -> a line per pair the run splits
- `ds4_pairs | ds4.fleet.pair_removal_problems(host, removing, alone)` -> why one member may not go alone
"""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._pair.fleet import (
    gateway_backends,
    left_out,
    removal_problems,
)


def pair_left_out(pairs, in_play, verb="provisioned"):
    return left_out(pairs, list(in_play), verb)


def pair_removal_problems(pairs, host, removing, alone=False):
    return removal_problems(host, list(removing), pairs, alone)


def gateway_backends_filter(hosts, pairs):
    return gateway_backends(list(hosts), pairs)


class FilterModule:
    def filters(self):
        return {
            "gateway_backends": gateway_backends_filter,
            "pair_left_out": pair_left_out,
            "pair_removal_problems": pair_removal_problems,
        }
