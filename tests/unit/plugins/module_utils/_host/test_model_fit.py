"""A streamed family fitted before anything changes (module_utils/_host/model_fit.py, issue 53): its resident
part and pinned expert cache against the Spark's memory, and its file on a local disk, never a network one."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._host.model_fit import streamed_fit
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import serving

REPO = Path(__file__).resolve().parents[5]
CATALOG = yaml.safe_load((REPO / "roles" / "ds4_common" / "defaults" / "main.yml").read_text())[
    "ds4_model_catalog"
]
GIB = 1 << 30
SPARK = 128 * GIB
FLOOR = 4 * GIB
LOCAL = {"mount_point": "/var/lib/ds4", "fstype": "xfs", "source": "/dev/nvme1n1p1", "rotational": False}
DISK = {
    "mount_point": "/srv/ds4",
    "fstype": "ext4",
    "source": "/dev/sdb1",
    "device": "8:17",
    "rotational": True,
}
NFS = {"mount_point": "/var/lib/ds4/gguf", "fstype": "nfs4", "source": "nas:/export/gguf"}


def fit(generation, memory=SPARK, mount=LOCAL, gguf_dir="/var/lib/ds4/gguf"):
    return streamed_fit(serving(CATALOG, generation), "spark01", memory, FLOOR, gguf_dir, mount)


@pytest.mark.parametrize("generation", ["v4.1", "qwen3.8"])
def test_a_streamed_family_fits_a_spark_from_a_local_disk(generation):
    assert fit(generation) == ([], [])


def test_a_resident_family_is_not_judged_here():
    # Its whole file in memory is the quantization's fit (_pair.declaration); a network disk is no stall.
    assert fit("0731", memory=8 * GIB, mount=NFS) == ([], [])


def test_a_streamed_family_on_a_network_mount_is_refused_naming_the_path():
    errors, _ = fit("v4.1", mount=NFS)
    assert errors == [
        "ds4_model_family 'deepseek-v4.1-flash' streams its experts from disk at every token, and "
        "ds4_gguf_dir /var/lib/ds4/gguf is on a network filesystem (nfs4 nas:/export/gguf at "
        "/var/lib/ds4/gguf): put ds4_gguf_dir on a local NVMe disk"
    ]


def test_a_streamed_family_on_a_spinning_disk_is_refused_naming_the_path():
    errors, _ = fit("qwen3.8", mount=DISK, gguf_dir="/srv/ds4/gguf")
    assert errors == [
        "ds4_model_family 'qwen3.8-flash-next' streams its experts from disk at every token, and "
        "ds4_gguf_dir /srv/ds4/gguf is on a rotational disk (/dev/sdb1 at /srv/ds4, device 8:17: the "
        "kernel's /sys/dev/block/8:17 says it spins): put ds4_gguf_dir on a local NVMe disk"
    ]
    # A resident family reads its file once, at its start: any disk serves it.
    assert fit("0731", mount=DISK) == ([], [])


def test_a_local_disk_the_kernel_cannot_tell_of_is_served():
    # An overlay or a filesystem in a container has no block device of its own: nothing to refuse.
    assert fit("v4.1", mount=dict(LOCAL, rotational=None)) == ([], [])


def test_its_resident_part_and_cache_must_fit_the_memory():
    errors, _ = fit("v4.1", memory=64 * GIB)
    assert errors == [
        "ds4_model_family 'deepseek-v4.1-flash' keeps 12,884,901,888 bytes (12.00 GiB) resident and a pinned "
        "expert cache of 64 GB (--ssd-streaming-cache-experts): 81,604,378,624 bytes (76.00 GiB), and "
        "spark01 has 64,424,509,440 bytes (60.00 GiB) for it (68,719,476,736 bytes (64.00 GiB) less the "
        "engine's floor); serve a resident family on this Spark"
    ]


def test_an_unknown_filesystem_is_a_warning_not_a_refusal():
    errors, warnings = fit("qwen3.8", mount=None)
    assert errors == []
    assert warnings == [
        "cannot tell the filesystem of ds4_gguf_dir /var/lib/ds4/gguf from /proc/self/mountinfo: make sure "
        "it is a local NVMe disk, as ds4_model_family 'qwen3.8-flash-next' streams its experts from it"
    ]
