"""The filter module_utils_path (plugins/filter/ds4_collection.py): the collection's module_utils files."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_collection import module_utils_path

MODULE_UTILS = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"


def test_a_module_is_found_where_the_collection_is():
    path = Path(module_utils_path("ds4_version.py"))
    assert path.is_absolute()
    assert path.read_bytes() == (MODULE_UTILS / "ds4_version.py").read_bytes()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../filter/ds4_collection.py", "takes the file name"),
        ("/etc/passwd", "takes the file name"),
        ("ds4_version", "takes the file name"),
        (None, "takes the file name"),
        ("ds4_nothing.py", "has no ds4_nothing.py"),
    ],
)
def test_anything_but_a_module_of_module_utils_is_refused(name, says):
    with pytest.raises(AnsibleFilterError, match=says):
        module_utils_path(name)
