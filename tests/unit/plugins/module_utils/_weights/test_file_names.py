"""The names of the files a weight file keeps beside it (module_utils/_weights/file_names.py) and the filter
that gives roles the same names."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_models import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import (
    companion_names,
    held_name,
    part_name,
    progress_name,
    ranges_name,
    sidecar_name,
    weight_file_path,
)

NAME = "DSpark-drafter-Q2K-Q8-0731.gguf"


def test_each_companion_is_spelled_once():
    assert [part_name(NAME), ranges_name(NAME), held_name(NAME), sidecar_name(NAME), progress_name(NAME)] == [
        f"{NAME}.part",
        f".{NAME}.part.json",
        f".{NAME}.part.held.json",
        f".{NAME}.verified.json",
        f".{NAME}.progress.json",
    ]
    assert companion_names(NAME) == [
        NAME,
        part_name(NAME),
        ranges_name(NAME),
        held_name(NAME),
        sidecar_name(NAME),
        progress_name(NAME),
    ]


@pytest.mark.parametrize(
    "kind, path",
    [
        ("file", f"/var/lib/ds4/gguf/{NAME}"),
        ("part", f"/var/lib/ds4/gguf/{NAME}.part"),
        ("ranges", f"/var/lib/ds4/gguf/.{NAME}.part.json"),
        ("record", f"/var/lib/ds4/gguf/.{NAME}.verified.json"),
        ("progress", f"/var/lib/ds4/gguf/.{NAME}.progress.json"),
    ],
)
def test_the_filter_gives_roles_the_same_paths(kind, path):
    weight_file_path_filter = FilterModule().filters()["weight_file_path"]
    assert weight_file_path_filter(NAME, "/var/lib/ds4/gguf", kind) == path
    assert weight_file_path(NAME, "/var/lib/ds4/gguf", kind) == path


def test_an_unknown_kind_is_refused_naming_the_kinds():
    with pytest.raises(AnsibleFilterError, match=r"no weight file kind 'sidecar'; wanted one of file, part"):
        FilterModule().filters()["weight_file_path"](NAME, "/var/lib/ds4/gguf", "sidecar")
