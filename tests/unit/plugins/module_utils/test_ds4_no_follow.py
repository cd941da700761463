"""module_utils/ds4_no_follow.py: a run's own files are read, a missing one is None, a link is refused."""

import errno

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_no_follow import read_text


def test_a_file_is_read_and_a_missing_one_is_none(tmp_path):
    (tmp_path / "lock").write_text('{"pid": 1}\n')
    assert read_text(str(tmp_path / "lock")) == '{"pid": 1}\n'
    assert read_text(str(tmp_path / "none")) is None


def test_a_link_is_never_followed(tmp_path):
    (tmp_path / "target").write_text("secret\n")
    (tmp_path / "lock").symlink_to(tmp_path / "target")
    with pytest.raises(OSError) as caught:
        read_text(str(tmp_path / "lock"))
    assert caught.value.errno == errno.ELOOP
