"""module_utils/_pair/fleet.py: a pair as one unit on day two (upgrade, gateway, removal)."""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._pair.fleet import (
    gateway_backends,
    left_out,
    pair_of_host,
    removal_problems,
    unit_name,
    units,
)

PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
FLEET = ["spark01", "spark05", "spark02", "spark04", "spark03"]


def test_each_member_finds_its_pair():
    assert pair_of_host(PAIRS, "spark04") == ("pair01", "spark04", "spark05")
    assert pair_of_host(PAIRS, "spark05") == ("pair01", "spark04", "spark05")
    assert pair_of_host(PAIRS, "spark01") is None and pair_of_host({}, "spark04") is None


def test_a_pair_is_one_unit_where_its_first_member_stands_coordinator_first():
    assert units(FLEET, PAIRS) == [["spark01"], ["spark04", "spark05"], ["spark02"], ["spark03"]]
    assert units(FLEET, {}) == [[host] for host in FLEET]
    assert unit_name(["spark04", "spark05"], PAIRS) == "pair01 (spark04+spark05)"
    assert unit_name(["spark01"], PAIRS) == "spark01"


def test_a_declaration_without_both_members_makes_no_unit():
    broken = {"pair01": {"coordinator": {"host": "spark04"}}, "pair02": "nonsense"}
    assert units(FLEET, broken) == [[host] for host in FLEET]
    assert gateway_backends(FLEET, broken) == FLEET


def test_the_gateway_sends_to_coordinators_and_single_sparks_never_a_worker():
    assert gateway_backends(FLEET, PAIRS) == ["spark01", "spark02", "spark04", "spark03"]


def test_a_run_with_one_member_of_a_pair_names_the_other():
    assert left_out(PAIRS, ["spark01", "spark04", "spark05"], "upgraded") == []
    assert left_out(PAIRS, ["spark01", "spark03"], "upgraded") == []
    assert left_out(PAIRS, ["spark01", "spark05"], "upgraded") == [
        "ds4_pairs['pair01']: this run takes spark05 without spark04; a pair is upgraded as one (limit the"
        " run to both members, -l spark04,spark05)"
    ]


def test_one_member_is_removed_alone_only_when_the_operator_says_so():
    assert removal_problems("spark04", ["spark04", "spark05"], PAIRS) == []
    assert removal_problems("spark01", ["spark01"], PAIRS) == []
    (problem,) = removal_problems("spark05", ["spark05"], PAIRS)
    assert problem.startswith("spark05 is the worker of the pair pair01 and its other member spark04 is not")
    assert "-e ds4_remove_pair_member_alone=true" in problem
    (problem,) = removal_problems("spark04", ["spark01", "spark04"], PAIRS)
    assert "coordinator of the pair pair01" in problem and "spark05" in problem
    assert removal_problems("spark05", ["spark05"], PAIRS, alone=True) == []
    # Only a true boolean says so: a string from -e is not clear enough ("false" is a true string).
    assert removal_problems("spark05", ["spark05"], PAIRS, alone="false") != []
