"""module_utils/_spark/no_follow.py: a run's own files are read, a missing one is None, a link is refused; a
directory handed to a user and an adopted file are walked to without links and changed through descriptors."""

import errno
import grp
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark import no_follow as ds4_no_follow
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
    UnsafePath,
    disown,
    move_planned,
    open_file,
    owned_dir,
    read_object,
    read_text,
    remove,
    set_attributes,
)


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


@pytest.mark.parametrize(
    "content",
    ['{"pid": 1', "[1, 2]", '"text"', "null", b"\xff\xfe not utf-8"],
    ids=["cut short", "a list", "a string", "null", "not utf-8"],
)
def test_a_record_that_is_no_json_object_is_a_value_error(tmp_path, content):
    """The records' one reader (the run lock, the run record, the last good release, the KV cache's family):
    each reader says what its file is, so anything but a JSON object is ValueError, never a crash."""
    record = tmp_path / "record"
    record.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError):
        read_object(str(record))


def test_a_record_is_its_json_object_a_missing_one_none_and_a_link_refused(tmp_path):
    (tmp_path / "record").write_text('{"pid": 1}\n')
    (tmp_path / "link").symlink_to(tmp_path / "record")
    assert read_object(str(tmp_path / "record")) == {"pid": 1}
    assert read_object(str(tmp_path / "none")) is None
    with pytest.raises(OSError) as caught:
        read_object(str(tmp_path / "link"))
    assert caught.value.errno == errno.ELOOP


# --- owned_dir: a directory handed to a user, made and chowned through descriptors (issue 26) ------------

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid


@pytest.fixture
def root_dir():
    """A directory like a real parent of a handed-over one: root's, writable by root alone, every parent
    too (pytest's own lies under /tmp, writable by everyone, which the walk rightly refuses)."""
    if os.geteuid() != 0:
        pytest.skip("chowning to another user needs root")
    base = Path(tempfile.mkdtemp(prefix="ds4-no-follow-", dir="/var/cache"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base)


def _owner(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_a_missing_directory_is_made_and_handed_over_its_parents_root_s(root_dir):
    target = root_dir / "a" / "b" / "kv"
    result = owned_dir(str(target), NOBODY, NOGROUP, 0o750)
    assert result["changed"] and result["created"] == [
        str(root_dir / "a"),
        str(root_dir / "a/b"),
        str(target),
    ]
    assert _owner(target) == (NOBODY, NOGROUP, 0o750)
    assert _owner(root_dir / "a") == (0, 0, 0o755) and _owner(root_dir / "a/b") == (0, 0, 0o755)
    again = owned_dir(str(target), NOBODY, NOGROUP, 0o750)
    assert not again["changed"] and again["created"] == []


def test_check_mode_says_what_it_would_make_and_changes_nothing(root_dir):
    (root_dir / "kv").mkdir(mode=0o755)
    result = owned_dir(str(root_dir / "kv" / "x" / "y"), NOBODY, NOGROUP, 0o750, check_mode=True)
    assert result["changed"] and result["created"] == [str(root_dir / "kv/x"), str(root_dir / "kv/x/y")]
    assert not (root_dir / "kv" / "x").exists()
    result = owned_dir(str(root_dir / "kv"), NOBODY, NOGROUP, 0o750, check_mode=True)
    assert result["changed"] and result["before"]["uid"] == 0 and result["after"]["uid"] == NOBODY
    assert _owner(root_dir / "kv") == (0, 0, 0o755)


def test_a_link_at_any_component_is_refused_and_nothing_is_chowned(root_dir):
    victim = root_dir / "etc"
    victim.mkdir(mode=0o755)
    (root_dir / "data").symlink_to(victim)
    (root_dir / "kv").symlink_to(victim)
    for path in (root_dir / "data" / "kv", root_dir / "kv"):
        with pytest.raises(UnsafePath, match="is a symbolic link"):
            owned_dir(str(path), NOBODY, NOGROUP, 0o750)
    assert _owner(victim) == (0, 0, 0o755) and list(victim.iterdir()) == []


def test_a_parent_writable_by_others_is_refused(root_dir):
    shared = root_dir / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafePath, match=r"shared is writable by its group or by others \(mode 0777\)"):
        owned_dir(str(shared / "kv"), NOBODY, NOGROUP, 0o750)
    assert not (shared / "kv").exists()


def test_a_parent_of_a_third_user_is_refused_the_owner_s_own_is_not(root_dir):
    home = root_dir / "home-of-nobody"
    home.mkdir(mode=0o750)
    os.chown(home, NOBODY, NOGROUP)
    # Another user's tree: they could swap what lies below for a link to /etc.
    with pytest.raises(UnsafePath, match=rf"belongs to uid {NOBODY}, neither root nor"):
        owned_dir(str(home / "kv"), 0, 0, 0o750)
    # The user's own home, for a directory handed to that same user.
    owned_dir(str(home / "gguf"), NOBODY, NOGROUP, 0o755)
    assert _owner(home / "gguf") == (NOBODY, NOGROUP, 0o755)


def test_a_directory_of_root_s_below_a_parent_of_a_named_user_is_changed_only_through_its_descriptor(
    root_dir, monkeypatch
):
    """Issue 55, point 3: node_exporter's textfile directory is root's, 0755, below /var/lib/prometheus,
    which the exporter's user owns. ansible.builtin.file checked for a link, then chmodded by path: that
    user, swapping in a link to /etc/shadow between the two, had it made 0755. Here the swap comes right
    before the change: the directory that was opened is changed, never what the path names since."""
    exporter = root_dir / "prometheus"
    exporter.mkdir(mode=0o755)
    os.chown(exporter, NOBODY, NOGROUP)
    (exporter / "node-exporter").mkdir(mode=0o700)
    shadow = root_dir / "shadow"
    shadow.write_text("root:*:1::::::\n")
    shadow.chmod(0o640)
    real = ds4_no_follow.set_attributes

    def swapped_first(fd, *args, **kwargs):
        os.rename(exporter / "node-exporter", exporter / "moved")
        os.symlink(shadow, exporter / "node-exporter")
        return real(fd, *args, **kwargs)

    with pytest.raises(UnsafePath, match=rf"belongs to uid {NOBODY}, neither root nor"):
        owned_dir(str(exporter / "node-exporter"), 0, 0, 0o755)
    monkeypatch.setattr(ds4_no_follow, "set_attributes", swapped_first)
    result = owned_dir(str(exporter / "node-exporter"), 0, 0, 0o755, parent_uids={NOBODY})
    assert result["changed"] and result["after"] == {"uid": 0, "gid": 0, "mode": "0755"}
    assert _owner(shadow) == (0, 0, 0o640)
    assert _owner(exporter / "moved") == (0, 0, 0o755)


def test_a_file_where_the_directory_should_be_is_refused(root_dir):
    (root_dir / "kv").write_text("")
    with pytest.raises(UnsafePath, match="is not a directory"):
        owned_dir(str(root_dir / "kv"), NOBODY, NOGROUP, 0o750)


def test_the_chown_goes_through_the_opened_directory_never_by_path(root_dir, monkeypatch):
    def by_path(*args, **kwargs):
        raise AssertionError(f"changed by path: {args}")

    for name in ("chown", "lchown", "chmod", "lchmod"):
        monkeypatch.setattr(os, name, by_path, raising=False)
    (root_dir / "kv").mkdir(mode=0o700)
    owned_dir(str(root_dir / "kv"), NOBODY, NOGROUP, 0o750)
    assert _owner(root_dir / "kv") == (NOBODY, NOGROUP, 0o750)


# --- open_file and set_attributes: an adopted weight file, one descriptor from hash to chown -------------


def test_a_file_is_opened_with_no_link_at_any_component(root_dir):
    (root_dir / "real").mkdir()
    (root_dir / "real" / "model.gguf").write_bytes(b"weights")
    (root_dir / "gguf").symlink_to(root_dir / "real")
    fd = open_file(str(root_dir / "real" / "model.gguf"))
    try:
        assert os.read(fd, 16) == b"weights"
    finally:
        os.close(fd)
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        open_file(str(root_dir / "gguf" / "model.gguf"))
    with pytest.raises(FileNotFoundError):
        open_file(str(root_dir / "real" / "none.gguf"))


def test_a_link_the_roles_made_is_followed_once_and_no_further(root_dir):
    (root_dir / "home").mkdir()
    (root_dir / "home" / "model.gguf").write_bytes(b"weights")
    (root_dir / "shadow").write_text("secret")
    (root_dir / "in-place.gguf").symlink_to(root_dir / "home" / "model.gguf")
    with pytest.raises(UnsafePath, match="in-place.gguf is a symbolic link"):
        open_file(str(root_dir / "in-place.gguf"))
    fd = open_file(str(root_dir / "in-place.gguf"), follow_last_link=True)
    os.close(fd)
    # The installer's file swapped for a link to something else: refused, not followed a second time.
    (root_dir / "home" / "model.gguf").unlink()
    (root_dir / "home" / "model.gguf").symlink_to(root_dir / "shadow")
    with pytest.raises(UnsafePath, match="model.gguf is a symbolic link"):
        open_file(str(root_dir / "in-place.gguf"), follow_last_link=True)


def test_attributes_are_set_through_the_descriptor(root_dir, monkeypatch):
    path = root_dir / "model.gguf"
    path.write_bytes(b"weights")
    os.chmod(path, 0o600)
    fd = open_file(str(path))
    try:
        # Whatever lies at the path now is not what gets chowned: the opened file is.
        path.rename(root_dir / "moved.gguf")
        path.symlink_to(root_dir / "elsewhere")
        for name in ("chown", "lchown", "chmod", "lchmod"):
            monkeypatch.setattr(os, name, lambda *a, **k: pytest.fail("changed by path"), raising=False)
        assert set_attributes(fd, NOBODY, NOGROUP, 0o644, check_mode=True)[0]
        assert _owner(root_dir / "moved.gguf") == (0, 0, 0o600)
        changed, before, after = set_attributes(fd, NOBODY, NOGROUP, 0o644)
        assert changed and before == {"uid": 0, "gid": 0, "mode": "0600"}
        assert after == {"uid": NOBODY, "gid": NOGROUP, "mode": "0644"}
        assert set_attributes(fd, NOBODY, NOGROUP, 0o644)[0] is False
    finally:
        os.close(fd)
    assert _owner(root_dir / "moved.gguf") == (NOBODY, NOGROUP, 0o644)


# --- remove: what the roles made taken off, walked without links (issue 28) -------------------------------


def _tree(base):
    (base / "releases" / "v1" / "bin").mkdir(parents=True)
    (base / "releases" / "v1" / "bin" / "ds4-server").write_text("x")
    (base / "releases" / "v2").mkdir()
    (base / "releases" / "v2" / "ds4-server").write_text("y")
    return base


def test_a_tree_goes_whole_and_is_named_alone(tmp_path):
    _tree(tmp_path)
    assert remove(str(tmp_path / "releases")) == [str(tmp_path / "releases")]
    assert not (tmp_path / "releases").exists()
    assert remove(str(tmp_path / "releases")) == []


def test_a_link_below_goes_itself_and_its_target_stays(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    made = tmp_path / "made"
    made.mkdir()
    (made / "current").symlink_to(outside)
    (made / "model.gguf").symlink_to(outside / "precious")
    assert remove(str(made)) == [str(made)]
    assert (outside / "precious").read_text() == "keep me"


def test_a_link_above_is_refused_and_nothing_goes(tmp_path):
    real = _tree(tmp_path / "real")
    (tmp_path / "root").symlink_to(real)
    with pytest.raises(UnsafePath, match="symbolic link"):
        remove(str(tmp_path / "root" / "releases"))
    assert (real / "releases" / "v2" / "ds4-server").exists()


def test_what_is_kept_stays_with_the_directories_above_it(tmp_path):
    state = tmp_path / "state"
    (state / "gguf").mkdir(parents=True)
    (state / "gguf" / "model.gguf").write_text("w")
    (state / "watchdog.json").write_text("{}")
    (state / "kv").mkdir()
    (state / "kv" / "bank").write_text("k")
    removed = remove(str(state), keep=(str(state / "gguf"),))
    assert sorted(removed) == [str(state / "kv"), str(state / "watchdog.json")]
    assert sorted(p.name for p in state.iterdir()) == ["gguf"]
    assert (state / "gguf" / "model.gguf").exists()


def test_select_takes_only_the_entries_it_picks_and_the_directory_stays(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("build-v1.log", ".build-v1.progress.json", "theirs.log"):
        (logs / name).write_text("")
    removed = remove(str(logs), select=lambda name, _st: "build" in name)
    assert sorted(removed) == [str(logs / ".build-v1.progress.json"), str(logs / "build-v1.log")]
    assert sorted(p.name for p in logs.iterdir()) == ["theirs.log"]


def test_an_empty_directory_goes_and_one_with_something_left_stays(tmp_path):
    facts = tmp_path / "facts.d"
    facts.mkdir()
    (facts / "ds4.fact").write_text("{}")
    (facts / "theirs.fact").write_text("{}")
    remove(str(facts / "ds4.fact"))
    assert remove(str(facts), empty_only=True) == []
    remove(str(facts / "theirs.fact"))
    assert remove(str(facts), empty_only=True) == [str(facts)]
    assert not facts.exists()


def test_a_check_run_lists_what_would_go_counting_what_went_before_and_removes_nothing(tmp_path):
    facts = tmp_path / "facts.d"
    facts.mkdir()
    (facts / "ds4.fact").write_text("{}")
    gone = set()
    assert remove(str(facts / "ds4.fact"), gone=gone, check_mode=True) == [str(facts / "ds4.fact")]
    assert remove(str(facts), gone=gone, check_mode=True, empty_only=True) == [str(facts)]
    assert remove(str(facts), gone=gone, check_mode=True) == []
    assert (facts / "ds4.fact").exists()


# --- disown: a directory the operator named goes back to root when the removed account owns it (issue 40)


def test_a_directory_the_removed_account_owns_goes_to_root_and_stays(root_dir):
    kv = root_dir / "kv"
    kv.mkdir(mode=0o750)
    os.chown(kv, NOBODY, NOGROUP)
    assert disown(str(kv), NOBODY, check_mode=True) == [str(kv)]
    assert _owner(kv) == (NOBODY, NOGROUP, 0o750)
    assert disown(str(kv), NOBODY) == [str(kv)]
    assert _owner(kv) == (0, 0, 0o750)
    assert disown(str(kv), NOBODY) == []


def test_a_directory_that_is_not_there_is_nothing_to_disown(root_dir):
    # As remove() finds nothing to remove there: remove.yml goes on to the next setting.
    assert disown(str(root_dir / "kv"), NOBODY) == []
    assert disown(str(root_dir / "no-such-mount" / "kv"), NOBODY) == []


def test_a_directory_another_owns_or_reached_by_a_link_is_not_handed_to_root(root_dir):
    theirs = root_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY + 1, NOGROUP)
    assert disown(str(theirs), NOBODY) == []
    assert _owner(theirs)[0] == NOBODY + 1
    (root_dir / "link").symlink_to(theirs)
    os.chown(theirs, NOBODY, NOGROUP)
    with pytest.raises(UnsafePath):
        disown(str(root_dir / "link"), NOBODY)
    assert _owner(theirs)[0] == NOBODY


# --- move_planned: adoption moves the file the plan found, never a link swapped in since (issue 40) -----


def _planned(path):
    st = os.lstat(path)
    return st.st_dev, st.st_ino


def test_the_file_the_plan_found_is_moved_itself(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "gguf").mkdir()
    src, dest = tmp_path / "home" / "w.gguf", tmp_path / "gguf" / "w.gguf"
    src.write_bytes(b"weights")
    planned = _planned(src)
    move_planned(str(src), str(dest), *planned)
    assert _planned(dest) == planned and not src.exists()


@pytest.mark.parametrize("swap", ["link", "file"])
def test_a_link_or_file_swapped_in_since_the_plan_is_refused_and_nothing_moves(tmp_path, swap):
    (tmp_path / "home").mkdir()
    (tmp_path / "gguf").mkdir()
    src, dest = tmp_path / "home" / "w.gguf", tmp_path / "gguf" / "w.gguf"
    src.write_bytes(b"weights")
    planned = _planned(src)
    # The file's owner swaps it after the plan: a link to root's file, or another file of the same name
    # (the planned one kept aside, so that its inode number is not reused).
    src.rename(tmp_path / "home" / "kept")
    (tmp_path / "secret").write_text("root's\n")
    if swap == "link":
        src.symlink_to(tmp_path / "secret")
    else:
        src.write_bytes(b"other weights")
    with pytest.raises(UnsafePath, match="not the file the plan found"):
        move_planned(str(src), str(dest), *planned)
    assert not os.path.lexists(dest) and os.path.lexists(src)
