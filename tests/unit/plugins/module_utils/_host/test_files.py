"""ds4_files on real files: written once, then left alone; a changed mode or owner is put right; a link at
a name is replaced, never written through; a directory others may write into is refused."""

import os
import stat

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.files import install
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import UnsafePath

FILES = {"ds4-ready": (b"#!/bin/sh\necho ready\n", 0o755), "ds4_version.py": (b"VERSION = 1\n", 0o644)}


@pytest.fixture
def lib(tmp_path):
    path = tmp_path / "lib"
    path.mkdir(mode=0o755)
    return path


def test_check_mode_then_the_files_then_nothing(lib):
    done = install(str(lib), FILES, check_mode=True)
    assert done["changed"] == ["ds4-ready", "ds4_version.py"] and list(lib.iterdir()) == []
    assert done["diff"][0]["before_header"] == f"{lib}/ds4-ready (absent)"
    assert done["diff"][0]["after"] == "#!/bin/sh\necho ready\n"
    assert install(str(lib), FILES)["changed"] == ["ds4-ready", "ds4_version.py"]
    assert (lib / "ds4-ready").read_bytes() == FILES["ds4-ready"][0]
    assert stat.S_IMODE((lib / "ds4-ready").stat().st_mode) == 0o755
    assert stat.S_IMODE((lib / "ds4_version.py").stat().st_mode) == 0o644
    assert install(str(lib), FILES) == {"changed": [], "diff": []}
    assert sorted(path.name for path in lib.iterdir()) == ["ds4-ready", "ds4_version.py"]


def test_a_changed_file_or_mode_alone_is_written_again(lib):
    install(str(lib), FILES)
    (lib / "ds4_version.py").write_bytes(b"VERSION = 2\n")
    os.chmod(lib / "ds4-ready", 0o777)
    done = install(str(lib), FILES)
    assert done["changed"] == ["ds4-ready", "ds4_version.py"]
    assert done["diff"][0]["before_header"] == f"{lib}/ds4-ready (mode 0777)"
    assert done["diff"][1]["before"] == "VERSION = 2\n" and done["diff"][1]["after"] == "VERSION = 1\n"
    assert (lib / "ds4_version.py").read_bytes() == b"VERSION = 1\n"
    assert stat.S_IMODE((lib / "ds4-ready").stat().st_mode) == 0o755


def test_a_link_at_a_name_is_replaced_and_its_target_untouched(lib, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not ours\n")
    (lib / "ds4-ready").symlink_to(target)
    assert install(str(lib), FILES)["changed"] == ["ds4-ready", "ds4_version.py"]
    assert not (lib / "ds4-ready").is_symlink() and (lib / "ds4-ready").read_bytes() == FILES["ds4-ready"][0]
    assert target.read_bytes() == b"not ours\n"


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda lib: os.chmod(lib, 0o777), "may be written by a user other than this one"),
        (lambda lib: (lib.rmdir(), lib.symlink_to("/etc")), "is a symbolic link: refusing to go through it"),
        (lambda lib: lib.rmdir(), "does not exist"),
    ],
    ids=["writable by others", "a link", "missing"],
)
def test_an_unsafe_or_missing_directory_is_refused_naming_it(lib, make, said):
    make(lib)
    with pytest.raises(UnsafePath, match=f"^{lib} {said}"):
        install(str(lib), FILES)
    assert not os.path.lexists(lib / "ds4-ready") or os.path.islink(lib)


def test_in_check_mode_a_missing_directory_means_every_file_is_to_come(lib):
    lib.rmdir()
    assert install(str(lib), FILES, check_mode=True)["changed"] == ["ds4-ready", "ds4_version.py"]
    assert not lib.exists()


def test_a_directory_at_a_name_or_a_path_as_a_name_is_refused(lib):
    (lib / "ds4-ready").mkdir()
    with pytest.raises(UnsafePath, match="ds4-ready is not a regular file"):
        install(str(lib), FILES)
    with pytest.raises(UnsafePath, match="is not a file name"):
        install(str(lib), {"../evil": (b"x", 0o644)})
