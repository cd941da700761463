"""Release tag ordering (module_utils/_spark/version.py) and the filters over it."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_versions import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import (
    compare_releases,
    is_newer,
    is_release_tag,
    parse_release,
    releases_to_prune,
    sort_releases,
)

FILTERS = FilterModule().filters()


@pytest.mark.parametrize(
    ("tag", "parts"),
    [
        ("v0.6.5", (0, 6, 5)),
        ("0.6.5", (0, 6, 5)),
        ("v0.5.6.1", (0, 5, 6, 1)),
        ("v1.2.3.4.5", (1, 2, 3, 4, 5)),
        ("v0.10.0", (0, 10, 0)),
    ],
)
def test_parse_release(tag, parts):
    assert parse_release(tag) == parts


@pytest.mark.parametrize(
    "tag",
    [
        "",
        "v",
        "404",
        "v0.6",
        "V0.6.5",
        "v0.6.5-rc1",
        "v0.6.5\n",
        " v0.6.5",
        "v0..5",
        "v0.6.5.",
        "v0.05.6",
        "vv0.6.5",
        "v٠.٦.٥",
        "<html>",
        None,
        5,
        (0, 6, 5),
    ],
)
def test_parse_release_refuses(tag):
    with pytest.raises(ValueError, match="not a release tag") as info:
        parse_release(tag)
    assert repr(tag) in str(info.value)
    # What the ordering refuses is no release name either: one grammar for both.
    assert not is_release_tag(tag)


def test_a_release_name_needs_its_v_where_the_ordering_does_not():
    # ds4_release and the release directories: one release, one spelling, one directory.
    assert [is_release_tag(t) for t in ("v0.6.5", "v0.5.6.1", "0.6.5")] == [True, True, False]
    assert parse_release("0.6.5") == parse_release("v0.6.5")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("v0.5.6.1", "v0.5.6", 1),
        ("v0.5.6", "v0.5.6.1", -1),
        ("v0.5.6.2", "v0.5.6.1", 1),
        ("v0.5.6.0", "v0.5.6", 1),
        ("v0.10.0", "v0.9.9", 1),
        ("v0.6.3.1", "v0.6.5", -1),
        ("v1.0.0", "v0.99.99.99", 1),
        ("v0.6.5", "0.6.5", 0),
        ("v0.6.5", "v0.6.5", 0),
    ],
)
def test_compare_releases(a, b, expected):
    assert compare_releases(a, b) == expected
    assert compare_releases(b, a) == -expected
    assert is_newer(a, b) is (expected > 0)


def test_sort_releases_oldest_first():
    tags = ["v0.6.5", "v0.5.6.1", "v0.10.0", "v0.5.6", "v0.6.3.1", "v0.5.3", "v0.6.3", "v0.9.9"]
    assert sort_releases(tags) == [
        "v0.5.3",
        "v0.5.6",
        "v0.5.6.1",
        "v0.6.3",
        "v0.6.3.1",
        "v0.6.5",
        "v0.9.9",
        "v0.10.0",
    ]


def test_sort_releases_takes_any_iterable_and_keeps_equal_order():
    assert sort_releases(t for t in ["0.6.5", "v0.5.6", "v0.6.5"]) == ["v0.5.6", "0.6.5", "v0.6.5"]


def test_sort_releases_refuses_a_bare_string():
    with pytest.raises(ValueError, match="tags must be a list of release tags: 'v0.6.5'"):
        sort_releases("v0.6.5")


PRESENT = ["v0.6.5", "v0.5.3", "v0.6.3", "v0.5.6.1", "v0.5.6", "v0.6.3.1"]


@pytest.mark.parametrize(
    ("keep", "protect", "expected"),
    [
        (2, [], ["v0.5.3", "v0.5.6", "v0.5.6.1", "v0.6.3"]),
        # The running release is the newest and the rollback one is old: both stay, beside the newest 2.
        (2, ["v0.6.5", "v0.5.6"], ["v0.5.3", "v0.5.6.1", "v0.6.3"]),
        # Protection matches by version, whatever the spelling; no previous release yet is "" or None.
        (1, ["0.5.3", "", None], ["v0.5.6", "v0.5.6.1", "v0.6.3", "v0.6.3.1"]),
        (0, ["v0.6.3"], ["v0.5.3", "v0.5.6", "v0.5.6.1", "v0.6.3.1", "v0.6.5"]),
        ("3", [], ["v0.5.3", "v0.5.6", "v0.5.6.1"]),
        (6, [], []),
        (10, [], []),
        # A protected release that is not present changes nothing.
        (5, ["v9.9.9"], ["v0.5.3"]),
    ],
)
def test_releases_to_prune(keep, protect, expected):
    assert releases_to_prune(PRESENT, keep, protect) == expected
    assert FILTERS["releases_to_prune"](PRESENT, keep, protect) == expected


def test_releases_to_prune_nothing_present():
    assert releases_to_prune([], 2, ["v0.6.5"]) == []


@pytest.mark.parametrize(
    ("present", "keep", "protect", "message"),
    [
        (PRESENT, -1, [], "keep must be a whole number of 0 or more: -1"),
        (PRESENT, True, [], "keep must be a whole number of 0 or more, not a boolean: True"),
        (PRESENT, "two", [], "keep must be a whole number of 0 or more: 'two'"),
        (PRESENT, 2.0, [], "keep must be a whole number of 0 or more: 2.0"),
        (PRESENT + ["current"], 2, [], "not a release tag .*: 'current'"),
        (PRESENT, 2, ["latest"], "not a release tag .*: 'latest'"),
        (PRESENT, 2, "v0.6.5", "protect must be a list of release tags: 'v0.6.5'"),
        ("v0.6.5", 2, [], "present must be a list of release tags: 'v0.6.5'"),
    ],
)
def test_releases_to_prune_refuses(present, keep, protect, message):
    with pytest.raises(ValueError, match=message):
        releases_to_prune(present, keep, protect)
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS["releases_to_prune"](present, keep, protect)


def test_filters():
    assert FILTERS["release_sort"](["v0.10.0", "v0.5.6.1", "v0.5.6"]) == ["v0.5.6", "v0.5.6.1", "v0.10.0"]
    assert FILTERS["release_newer"]("v0.5.6.1", "v0.5.6") is True
    assert FILTERS["release_newer"]("v0.5.6", "v0.5.6") is False
    assert FILTERS["release_newer"]("v0.9.9", "v0.10.0") is False


def test_filters_name_the_bad_value():
    with pytest.raises(AnsibleFilterError, match=r"not a release tag .*: 'main'"):
        FILTERS["release_sort"](["v0.6.5", "main"])
    with pytest.raises(AnsibleFilterError, match=r"not a release tag .*: 'v0.6'"):
        FILTERS["release_newer"]("v0.6", "v0.6.5")
