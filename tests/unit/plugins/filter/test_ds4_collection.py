"""The filter module_utils_path (plugins/filter/ds4_collection.py): the collection's Spark-side modules."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_collection import module_utils_path

SPARK = Path(__file__).resolve().parents[4] / "plugins" / "module_utils" / "_spark"


def test_a_module_is_found_where_the_collection_is():
    path = Path(module_utils_path("version.py"))
    assert path.is_absolute()
    assert path.read_bytes() == (SPARK / "version.py").read_bytes()


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../filter/ds4_collection.py", "takes the file name"),
        ("/etc/passwd", "takes the file name"),
        ("_spark/version.py", "takes the file name"),
        ("version", "takes the file name"),
        (None, "takes the file name"),
        ("nothing.py", "has no nothing.py"),
        ("__init__.py", "has no __init__.py"),
        # A module_utils module of another package: only the Spark-side one goes onto a host.
        ("settings.py", "has no settings.py"),
    ],
)
def test_anything_but_a_module_of_module_utils_is_refused(name, says):
    with pytest.raises(AnsibleFilterError, match=says):
        module_utils_path(name)
