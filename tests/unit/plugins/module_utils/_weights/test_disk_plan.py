"""The disk plan: what to fetch, adopt, keep and remove, and the refusal with its shortfall."""

import ast
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._weights.disk_plan import (
    GIB,
    POLICIES,
    DiskPlanError,
    placement,
    plan,
)

REPO = Path(__file__).resolve().parents[5]

DIR = "/var/lib/ds4/gguf"
HOME = "/home/op/gguf"
BASE, DRAFTER = "base-0731.gguf", "drafter-0731.gguf"
OLD_BASE, OLD_DRAFTER, OLD_MTP = "base.gguf", "drafter.gguf", "mtp.gguf"
SIZES = {BASE: 81 * GIB, DRAFTER: 6 * GIB, OLD_BASE: 80 * GIB, OLD_DRAFTER: 6 * GIB, OLD_MTP: 4 * GIB}
WANTED = [{"name": BASE, "size": SIZES[BASE], "role": "base"}, {"name": DRAFTER, "size": SIZES[DRAFTER]}]
OLD = [OLD_BASE, OLD_DRAFTER, OLD_MTP]
OLD_PRESENT = {n: SIZES[n] for n in OLD}  # 90 GiB of legacy files
NEW_BYTES = 87 * GIB


def run(free_gib, policy="auto", present=None, **kw):
    return plan(DIR, WANTED, int(free_gib * GIB), policy, present=present, other=OLD, **kw)


def names(entries):
    return [e["name"] for e in entries]


# (case, free GiB, policy, legacy present?, in use, fetch, remove_before, remove_after_smoke, kept: reason)
CASES = [
    ("fresh host", 500, "auto", False, [], [BASE, DRAFTER], [], [], {}),
    ("fresh host, keep", 500, "keep", False, [], [BASE, DRAFTER], [], [], {}),
    ("fresh host, remove", 500, "remove", False, [], [BASE, DRAFTER], [], [], {}),
    (
        "keep, fits beside",
        100,
        "keep",
        True,
        [],
        [BASE, DRAFTER],
        [],
        [],
        dict.fromkeys(OLD, "ds4_old_weights=keep"),
    ),
    ("remove, fits beside", 100, "remove", True, [], [BASE, DRAFTER], [], OLD, {}),
    ("remove, needs room", 50, "remove", True, [], [BASE, DRAFTER], OLD, [], {}),
    (
        "auto, fits beside",
        100,
        "auto",
        True,
        [],
        [BASE, DRAFTER],
        [],
        [],
        dict.fromkeys(OLD, "ds4_old_weights=remove"),
    ),
    ("auto, needs room", 50, "auto", True, [], [BASE, DRAFTER], OLD, [], {}),
    (
        "auto, needs room, old base in use",
        80,
        "auto",
        True,
        [f"{DIR}/{OLD_BASE}"],
        [BASE, DRAFTER],
        [OLD_DRAFTER, OLD_MTP],
        [],
        {OLD_BASE: "in use by the running service"},
    ),
    (
        "remove, fits, old base in use",
        100,
        "remove",
        True,
        [f"{DIR}/{OLD_BASE}"],
        [BASE, DRAFTER],
        [],
        [OLD_DRAFTER, OLD_MTP],
        {OLD_BASE: "in use by the running service"},
    ),
]


@pytest.mark.parametrize(
    "free, policy, legacy, in_use, fetch, before, after, kept",
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_policies(free, policy, legacy, in_use, fetch, before, after, kept):
    result = run(free, policy, present=OLD_PRESENT if legacy else {}, in_use=in_use)
    assert result["fits"] is True
    assert names(result["fetch"]) == fetch
    assert names(result["remove_before"]) == before
    assert names(result["remove_after_smoke"]) == after
    assert {k["name"] for k in result["keep"]} >= set(kept)
    for name, reason in kept.items():
        assert reason in result_reason(result, name)
    assert result["need_bytes"] == NEW_BYTES
    freed = sum(SIZES[n] for n in before)
    assert result["free_after_bytes"] == int(free * GIB) + freed - NEW_BYTES
    assert result["message"]


def result_reason(result, name):
    return next(k["reason"] for k in result["keep"] if k["name"] == name)


SMALL_OLD = {OLD_DRAFTER: SIZES[OLD_DRAFTER], OLD_MTP: SIZES[OLD_MTP]}  # 10 GiB
OLD_BASE_IN_USE = [f"{DIR}/{OLD_BASE}"]

# (case, free GiB, policy, legacy present, in use, shortfall GiB, words in the message)
REFUSALS = [
    (
        "keep, needs room",
        50,
        "keep",
        OLD_PRESENT,
        [],
        37,
        ["ds4_old_weights=keep forbids removing", "(90.0 GiB)"],
    ),
    ("keep, fresh host", 50, "keep", {}, [], 37, []),
    (
        "remove, even removal short",
        5,
        "remove",
        SMALL_OLD,
        [],
        72,
        ["even after removing the other generation (10.0"],
    ),
    (
        "auto, even removal short",
        5,
        "auto",
        SMALL_OLD,
        [],
        72,
        ["even after removing the other generation (10.0"],
    ),
    ("auto, old base in use", 10, "auto", OLD_PRESENT, OLD_BASE_IN_USE, 67, ["80.0 GiB more are in use"]),
    ("remove, old base in use", 10, "remove", OLD_PRESENT, OLD_BASE_IN_USE, 67, ["80.0 GiB more are in use"]),
]


@pytest.mark.parametrize(
    "free, policy, present, in_use, short_gib, words", [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_refusals_carry_the_shortfall(free, policy, present, in_use, short_gib, words):
    with pytest.raises(DiskPlanError) as e:
        run(free, policy, present=present, in_use=in_use)
    err = e.value
    assert err.shortfall_bytes == short_gib * GIB
    assert err.shortfall_gib == short_gib
    assert err.directory == DIR
    assert err.plan["fits"] is False and err.plan["shortfall_bytes"] == short_gib * GIB
    text = str(err)
    assert f"short by {short_gib * GIB:,} bytes ({short_gib:.2f} GiB)" in text
    assert text.startswith(f"not enough space in {DIR}: the weights need {NEW_BYTES:,} bytes (87.00 GiB), ")
    for word in words:
        assert word in text


def test_the_shortfall_message_in_full():
    with pytest.raises(DiskPlanError) as e:
        plan(DIR, [{"name": BASE, "size": 3 * GIB + 512}], GIB, "keep", present={OLD_BASE: GIB}, other=OLD)
    assert str(e.value) == (
        f"not enough space in {DIR}: the weights need 3,221,225,984 bytes (3.00 GiB), 1,073,741,824 bytes "
        "(1.00 GiB) are free, short by 2,147,484,160 bytes (2.00 GiB); ds4_old_weights=keep forbids removing "
        "the other generation (1.0 GiB)"
    )


@pytest.mark.parametrize(
    "present, partial, fetch",
    [
        ({BASE: SIZES[BASE], DRAFTER: SIZES[DRAFTER]}, {}, []),
        ({BASE: SIZES[BASE]}, {DRAFTER: 2 * GIB}, [(DRAFTER, 2 * GIB, 4 * GIB, False)]),
        ({}, {BASE: 90 * GIB}, [(BASE, 0, 81 * GIB, False), (DRAFTER, 0, 6 * GIB, False)]),
        ({BASE: 80 * GIB, DRAFTER: SIZES[DRAFTER]}, {}, [(BASE, 0, 81 * GIB, True)]),
    ],
    ids=["all present", "part resumes", "part longer than the file", "wrong size replaced"],
)
def test_present_and_partial_files(present, partial, fetch):
    result = plan(DIR, WANTED, 200 * GIB, present=present, partial=partial)
    assert [(f["name"], f["resume_from"], f["bytes"], f["replaces"]) for f in result["fetch"]] == fetch
    assert result["need_bytes"] == sum(f[2] for f in fetch)
    assert [f["path"] for f in result["files"]] == [f"{DIR}/{BASE}", f"{DIR}/{DRAFTER}"]
    assert result["files"][0]["role"] == "base"


def adoptable(name, size, same_fs, path=None):
    return {"name": name, "path": path or f"{HOME}/{name}", "size": size, "same_fs": same_fs}


@pytest.mark.parametrize(
    "free_gib, found, adopt, fetch",
    [
        (10, [adoptable(BASE, SIZES[BASE], True)], [(BASE, "move", f"{DIR}/{BASE}", False)], [DRAFTER]),
        (100, [adoptable(BASE, SIZES[BASE], False)], [(BASE, "copy", f"{DIR}/{BASE}", False)], [DRAFTER]),
        (10, [adoptable(BASE, SIZES[BASE], False)], [(BASE, "in_place", f"{HOME}/{BASE}", False)], [DRAFTER]),
        (
            100,
            [adoptable(BASE, 30 * GIB, True)],
            [(BASE, "move", f"{DIR}/{BASE}.part", True)],
            [BASE, DRAFTER],
        ),
        (100, [adoptable(BASE, 30 * GIB, False)], [], [BASE, DRAFTER]),
        (100, [adoptable(BASE, 90 * GIB, True)], [], [BASE, DRAFTER]),
    ],
    ids=[
        "same fs: moved",
        "other fs: copied",
        "other fs, no room: in place",
        "partial: resumed",
        "partial, other fs",
        "too long",
    ],
)
def test_adoption_from_a_shell_installer(free_gib, found, adopt, fetch):
    result = plan(DIR, WANTED, free_gib * GIB, adoptable=found)
    assert [(a["name"], a["action"], a["dest"], a["partial"]) for a in result["adopt"]] == adopt
    assert names(result["fetch"]) == fetch
    assert all(a["src"] == f"{HOME}/{BASE}" for a in result["adopt"])
    if adopt and adopt[0][1] == "in_place":
        assert result["files"][0]["path"] == f"{HOME}/{BASE}" and result["files"][0]["dir"] == HOME
        assert "in place" in result["message"]
    if adopt and adopt[0][3]:
        assert result["fetch"][0]["resume_from"] == 30 * GIB and result["need_bytes"] == 57 * GIB


def test_a_present_file_is_never_replaced_by_an_adoptable_one():
    result = plan(
        DIR,
        WANTED[:1],
        100 * GIB,
        present={BASE: SIZES[BASE]},
        adoptable=[adoptable(BASE, SIZES[BASE], True)],
    )
    assert result["adopt"] == [] and result["fetch"] == []


def test_copying_never_triggers_removal():
    found = [adoptable(BASE, SIZES[BASE], False)]
    result = plan(DIR, WANTED, 50 * GIB, "auto", present=OLD_PRESENT, other=OLD, adoptable=found)
    assert result["remove_before"] == [] and result["adopt"][0]["action"] == "in_place"


def test_removal_lists_every_companion_and_counts_parts():
    result = run(50, "remove", present={OLD_BASE: SIZES[OLD_BASE]}, partial={OLD_MTP: GIB})
    assert names(result["remove_before"]) == [OLD_BASE, OLD_MTP]
    mtp = result["remove_before"][1]
    assert mtp["bytes"] == GIB
    assert mtp["paths"] == [
        f"{DIR}/{p}"
        for p in (
            OLD_MTP,
            f"{OLD_MTP}.part",
            f".{OLD_MTP}.part.json",
            f".{OLD_MTP}.part.held.json",
            f".{OLD_MTP}.verified.json",
            f".{OLD_MTP}.progress.json",
        )
    ]


def test_bad_policy_and_unknown_size_are_refused():
    with pytest.raises(ValueError, match=r"ds4_old_weights='sometimes' is not one of: keep, remove, auto"):
        run(100, "sometimes")
    with pytest.raises(ValueError, match=r"'x.gguf' has no known size"):
        plan(DIR, [{"name": "x.gguf", "size": None}], GIB)


def _module_options(name):
    tree = ast.parse((REPO / "plugins" / "modules" / f"{name}.py").read_text())
    text = next(
        n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "DOCUMENTATION"
    )
    return yaml.safe_load(text)["options"]


def test_every_list_of_old_weights_choices_is_the_constant():
    # Ansible reads choices from YAML, so they are written there too; this holds them to POLICIES.
    specs = yaml.safe_load((REPO / "roles" / "ds4_common" / "meta" / "argument_specs.yml").read_text())
    lists = {
        "roles/ds4_common": specs["argument_specs"]["main"]["options"]["ds4_old_weights"]["choices"],
        "ds4_weights_plan": _module_options("ds4_weights_plan")["policy"]["choices"],
        "ds4_preflight_check": _module_options("ds4_preflight_check")["old_weights"]["choices"],
    }
    assert lists == dict.fromkeys(lists, list(POLICIES))


# (case, size, complete file, part, copy in ~/gguf, same filesystem, how, resume from)
PLACEMENTS = [
    ("in place", 10, 10, 0, None, True, "present", 10),
    ("absent", 10, None, 0, None, True, "fetch", 0),
    ("a part resumes", 10, None, 4, None, True, "fetch", 4),
    ("a part longer than the file starts over", 10, None, 11, None, True, "fetch", 0),
    ("a finished copy is adopted", 10, None, 0, 10, False, "adopt", 10),
    ("a shorter copy becomes the part", 10, None, 4, 6, True, "adopt_partial", 6),
    ("a shorter copy on another filesystem is not moved", 10, None, 4, 6, False, "fetch", 4),
    ("a copy shorter than the part is left", 10, None, 7, 6, True, "fetch", 7),
    ("a wrong-size file is replaced, not adopted over", 10, 3, 0, 10, True, "fetch", 0),
]


@pytest.mark.parametrize(
    "size, have, part, found, same_fs, how, resume_from",
    [c[1:] for c in PLACEMENTS],
    ids=[c[0] for c in PLACEMENTS],
)
def test_placement(size, have, part, found, same_fs, how, resume_from):
    assert placement(size, have, part, found, same_fs) == (how, resume_from)
