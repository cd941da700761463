"""Which filesystem holds a path, from the kernel's mount table (/proc/self/mountinfo), and whether the disk
under it spins (/sys/dev/block/MAJ:MIN).

A family served by streaming its experts (--ssd-streaming) reads the model from disk at every token: from
a network filesystem that is a stall per read, and from a spinning disk a seek, so such a file is refused
for streaming (issue 53).
"""

from __future__ import annotations

import os
import posixpath
import re

MOUNTINFO = "/proc/self/mountinfo"
SYS_ROOT = "/sys"

# Filesystems whose bytes cross a network (NFS, SMB, the FUSE ones that reach another host, cluster
# filesystems): never local NVMe.
_NETWORK = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "afs", "gpfs",
            "beegfs", "ocfs2", "davfs", "coda", "ncpfs", "virtiofs"}  # fmt: skip
_NETWORK_FUSE = {"sshfs", "glusterfs", "s3fs", "rclone", "davfs", "cephfs", "gcsfuse", "juicefs"}
# mountinfo writes a space, tab, newline and backslash in a path as an octal escape.
_ESCAPE = re.compile(r"\\([0-7]{3})")
_DEVICE = re.compile(r"[0-9]+:[0-9]+")


def _unescape(text):
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


def parse_mountinfo(text):
    """[{mount_point, fstype, source, device}] of each line of mountinfo, in its order (a later mount on the
    same point covers an earlier one); device is the filesystem's MAJ:MIN."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        # ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 3:
            continue
        mounts.append(
            {
                "mount_point": _unescape(fields[4]),
                "fstype": fields[dash + 1],
                "source": _unescape(fields[dash + 2]),
                "device": fields[2],
            }
        )
    return mounts


def mount_of(path, text):
    """The mount (parse_mountinfo's entry) that holds the absolute `path`: the deepest mount point above
    it, the last mounted where two share one; None for a relative path or a table without one."""
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    path = posixpath.normpath(path)
    found = None
    for mount in parse_mountinfo(text):
        point = mount["mount_point"]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (found is None or len(point) >= len(found["mount_point"])):
            found = mount
    return found


def is_network(fstype):
    """Whether a filesystem type reads its bytes over a network."""
    if fstype.startswith("fuse."):
        return fstype.split(".", 1)[1] in _NETWORK_FUSE
    return fstype in _NETWORK


def _read_flag(path):
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, ValueError):
        return None
    return {"0": False, "1": True}.get(text)


def rotational(device, sys_root=SYS_ROOT):
    """Whether the block device MAJ:MIN `device` spins, as the kernel says in its queue/rotational (a
    partition's is its disk's, the directory above it); None where the kernel lists no such block device
    (an overlay's or a tmpfs's major 0) or says nothing readable."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device) or device.startswith("0:"):
        return None
    node = os.path.join(sys_root, "dev", "block", device)
    flag = _read_flag(os.path.join(node, "queue", "rotational"))
    if flag is None and os.path.exists(os.path.join(node, "partition")):
        flag = _read_flag(os.path.join(os.path.realpath(node), os.pardir, "queue", "rotational"))
    return flag
