"""Which filesystem holds a path, read from /proc/self/mountinfo (module_utils/_host/mounts.py): a streamed
model family is served only from a local disk (issue 53)."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.mounts import (
    is_network,
    mount_of,
    parse_mountinfo,
    rotational,
)

# As a Spark with its weights on NVMe, a site's NFS share and a mount point with a space prints it.
MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
30 27 259:3 / /var/lib/ds4 rw,relatime shared:5 - xfs /dev/nvme1n1p1 rw
31 30 0:50 / /var/lib/ds4/gguf/share rw,relatime shared:9 - nfs4 nas:/export/gguf rw,vers=4.2
32 27 0:51 /models /srv/ds4\\040models rw,relatime - cifs //nas/models rw
33 27 0:52 / /mnt/sshfs rw,nosuid - fuse.sshfs me@host:/gguf rw
"""


def test_each_line_gives_its_mount_point_filesystem_and_source():
    mounts = parse_mountinfo(MOUNTINFO)
    assert mounts[1] == {"mount_point": "/", "fstype": "ext4", "source": "/dev/nvme0n1p2", "device": "259:2"}
    # Optional fields (shared:N) come before the "-", and a space in a mount point is written \\040.
    assert mounts[4] == {
        "mount_point": "/srv/ds4 models", "fstype": "cifs", "source": "//nas/models", "device": "0:51",
    }  # fmt: skip


@pytest.mark.parametrize(
    "path, mount_point, fstype",
    [
        ("/var/lib/ds4/gguf", "/var/lib/ds4", "xfs"),
        ("/var/lib/ds4/gguf/share/DeepSeek-V4.1-Flash-Q2.gguf", "/var/lib/ds4/gguf/share", "nfs4"),
        ("/var/lib/ds4/gguf/shared", "/var/lib/ds4", "xfs"),  # a prefix of a name is no parent
        ("/srv/ds4 models/x.gguf", "/srv/ds4 models", "cifs"),
        ("/opt/ds4", "/", "ext4"),
    ],
)
def test_the_deepest_mount_above_a_path_holds_it(path, mount_point, fstype):
    mount = mount_of(path, MOUNTINFO)
    assert (mount["mount_point"], mount["fstype"]) == (mount_point, fstype)


def test_a_path_no_mount_holds_or_an_unreadable_table_gives_none():
    assert mount_of("/var/lib/ds4", "") is None
    assert mount_of("relative/path", MOUNTINFO) is None


@pytest.mark.parametrize(
    "fstype, network",
    [("nfs4", True), ("nfs", True), ("cifs", True), ("smb3", True), ("fuse.sshfs", True), ("9p", True),
     ("ceph", True), ("xfs", False), ("ext4", False), ("btrfs", False), ("overlay", False)],
)  # fmt: skip
def test_network_filesystems_are_told_from_local_ones(fstype, network):
    assert is_network(fstype) is network


def sys_block(root, device, name, flag, partition_of=None):
    """A fake /sys: /sys/dev/block/MAJ:MIN linked to the device's directory, as the kernel lays it out (a
    partition's directory inside its disk's, whose queue/ says whether it spins)."""
    devices = root / "devices" / "pci0000:00"
    disk = devices / (partition_of or name)
    (disk / "queue").mkdir(parents=True, exist_ok=True)
    (disk / "queue" / "rotational").write_text(f"{flag}\n")
    target = disk
    if partition_of:
        target = disk / name
        target.mkdir()
        (target / "partition").write_text("1\n")
    (root / "dev" / "block").mkdir(parents=True, exist_ok=True)
    (root / "dev" / "block" / device).symlink_to(target)


def test_the_kernel_says_whether_a_mounts_disk_spins(tmp_path):
    sys_block(tmp_path, "259:3", "nvme1n1", 0)
    sys_block(tmp_path, "8:17", "sdb1", 1, partition_of="sdb")
    sys_block(tmp_path, "259:5", "nvme2n1p1", 0, partition_of="nvme2n1")
    assert rotational("259:3", str(tmp_path)) is False
    # A partition's flag is its disk's.
    assert rotational("8:17", str(tmp_path)) is True
    assert rotational("259:5", str(tmp_path)) is False
    # A filesystem without a block device (overlay, tmpfs: major 0), or one the kernel does not list.
    assert rotational("0:52", str(tmp_path)) is None
    assert rotational("8:99", str(tmp_path)) is None
    assert rotational("not a device", str(tmp_path)) is None
