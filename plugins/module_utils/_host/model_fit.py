"""Whether a Spark can serve a streamed model family, judged before anything changes (issue 53).

A resident family maps its whole file into memory: that is the quantization's fit (_pair.declaration). A
streamed one (V4.1, Qwen3.8: --ssd-streaming) keeps a resident part and a pinned expert cache in memory
and reads the rest of its experts from ds4_gguf_dir at every token, so that directory must be on a local
solid-state disk: from a network filesystem each read is a round trip, from a spinning disk a seek.
"""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import describe_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._host.mounts import MOUNTINFO, is_network

FAMILY_VAR = "ds4_model_family"
GGUF_DIR_VAR = "ds4_gguf_dir"
# The engine's --ssd-streaming-cache-experts NGB, counted in GiB: the larger reading, so a fit never
# passes a cache that would not fit.
GIB = 1 << 30


def streamed_fit(profile, host, memory_bytes, floor_bytes, gguf_dir, mount):
    """(errors, warnings) for serving the family `profile` (_weights.catalog.serving) on `host`: its memory
    (`memory_bytes` less `floor_bytes`, None when unknown) and the filesystem `mount` holding `gguf_dir`
    (_host.mounts.mount_of with its disk's `rotational`; None when the mount table could not tell).
    Nothing for a resident family."""
    if not profile["streamed"]:
        return [], []
    errors, warnings = [], []
    family = f"{FAMILY_VAR} {profile['family']!r}"
    if mount is None:
        warnings.append(
            f"cannot tell the filesystem of {GGUF_DIR_VAR} {gguf_dir} from {MOUNTINFO}: make sure it is a "
            f"local NVMe disk, as {family} streams its experts from it"
        )
    elif is_network(mount["fstype"]):
        errors.append(
            f"{family} streams its experts from disk at every token, and {GGUF_DIR_VAR} {gguf_dir} is on a "
            f"network filesystem ({mount['fstype']} {mount['source']} at {mount['mount_point']}): put "
            f"{GGUF_DIR_VAR} on a local NVMe disk"
        )
    elif mount.get("rotational") is True:
        errors.append(
            f"{family} streams its experts from disk at every token, and {GGUF_DIR_VAR} {gguf_dir} is on a "
            f"rotational disk ({mount['source']} at {mount['mount_point']}, device {mount['device']}: the "
            f"kernel's /sys/dev/block/{mount['device']} says it spins): put {GGUF_DIR_VAR} on a local NVMe "
            "disk"
        )
    if memory_bytes:
        cache_gb = profile["cache_experts_gb"]
        need = profile["resident_bytes"] + cache_gb * GIB
        room = memory_bytes - floor_bytes
        if need > room:
            errors.append(
                f"{family} keeps {describe_bytes(profile['resident_bytes'])} resident and a pinned expert "
                f"cache of {cache_gb} GB (--ssd-streaming-cache-experts): {describe_bytes(need)}, and {host} "
                f"has {describe_bytes(room)} for it ({describe_bytes(memory_bytes)} less the engine's "
                "floor); serve a resident family on this Spark"
            )
    return errors, warnings
