"""How ds4-server is launched: validated settings in, environment file and argument list out.

This is the installer's `ds4-serve` launcher (engine contract, "Launcher defaults") as data, so the
systemd unit can run ds4-server directly: `EnvironmentFile=/etc/ds4/ds4.env` plus `ExecStart=`.

Settings (the role variable that feeds each is `ds4_<key>`, and every message names it; the paths
the roles derive are named after what they come from):

| key | default | meaning |
|---|---|---|
| release_dir | required | directory holding `ds4-server` (absolute) |
| base_model | required | base GGUF (absolute) |
| dspark_model | required for dspark | drafter GGUF of its generation (absolute); upstream's support GGUF |
| mtp_model | required for mtp | legacy MTP GGUF (absolute) |
| speculation | dspark | dspark, mtp or plain (the catalog says which a generation has files for) |
| lineage | fork | fork or upstream (_engine.lineage): how dspark is passed, and which flags exist |
| model_generation | 0731 | a generation of ds4_model_catalog (_weights.catalog checks which) |
| ctx | 524288 | context length, tokens |
| host / port | 127.0.0.1 / 8000 | listen address |
| kv_disk_dir | /var/lib/ds4/kv | disk-persisted KV banks; '' leaves `--kv-disk-dir` out (engine: off) |
| kv_disk_space_mb | 4096 | passed with `--kv-disk-dir` |
| mem_floor_gb | 4 | `--mem-floor-gb`; '' leaves the flag out (engine default) |
| extra_args | [] | more ds4-server arguments |
| extra_env | {} | more environment, UPPERCASE names |
| lock_file | /run/ds4/ds4.lock | DS4_LOCK_FILE |
| dist_role | None | a pair member's role (ds4_pairs): coordinator or worker; None serves alone |
| dist_layers | None | its slice of the layers: 0:K (coordinator) or K+1:output (worker) |
| dist_host / dist_port | None | the coordinator's `--listen` on the link (a worker's `--coordinator`) |
| vision_model | None | the family's vision encoder (`--vision FILE`, absolute) |
| ssd_streaming_cache_gb | None | a streamed family: `--ssd-streaming --ssd-streaming-cache-experts NGB` |
| power | None | the `--power` percentage the family requires |
| builtin_mtp | False | mtp is the model's own block: `--mtp` without a file (GLM 5.3) |

The family settings come from the catalog (_weights.catalog.serving), never from an operator's extra_args.
| dist_mode | pipeline | the pair's mode (ds4_pairs): pipeline (`--layers`) or tensor (`--tensor-parallel`) |
| dist_transport | rdma | tensor only: rdma (found at each start by rdma_launcher) or tcp |
| dist_address | None | tensor with rdma: this member's own address on the link, whose RDMA device is sought |
| rdma_launcher | None | tensor with rdma: our `ds4-rdma-launch` (_spark.rdma), run at each start |
| rdma_sysfs_root | /sys | tensor with rdma: where the launcher reads sysfs (`--root`; a stand-in's tree) |
| rdma_limit_memlock | infinity | tensor with rdma: the unit's LimitMEMLOCK (the NIC pins the buffers) |

A setting given as None takes its default, so a module can pass every option through unchanged.

A pair in tensor mode (engine contract, "Two Sparks, the faster way"): the worker runs `ds4`, the CLI,
`--cuda -m MODEL --tensor-parallel --role worker --coordinator IP PORT`; the coordinator `ds4-server` with
its usual flags and `--tensor-parallel --role coordinator --listen IP PORT --batched-session 8`. With tcp
both get `--transport tcp`; with rdma the unit runs `rdma_launcher`, which appends `--transport rdma
--rdma-device DEV --rdma-gid-index N` as it finds them at that start (the RoCE v2 GID index moves across
reboots), or `--transport tcp` with a warning where no RDMA device serves the link, then becomes the
engine (exec: the unit's main process is the engine). The mode is upstream's (the fork has none).

Decisions:
- Numbers may be ints or strings of ASCII digits (`-e ds4_port=9000` arrives as a string). Booleans
  (True is the int 1 in Python), floats, signs, spaces and anything else are refused.
- extra_args may not repeat a flag this file manages, nor one that makes ds4-server exit at once:
  which copy of a repeated flag wins is up to the engine's parser, and the role's readiness probe,
  smoke test and lock all read the managed variables, so an override would leave them disagreeing.
  Change the variable instead. extra_env likewise may not set a managed variable.
- extra_env values and extra_args items may be strings or ints (YAML writes `64` as an int), never
  booleans (True could mean "1", "true" or "yes" to the engine) and never with control characters:
  a newline would start a new line in the environment file or the unit. A message about extra_env
  never shows a value, nor a name that is not a variable name: either may be a secret.
- The engine's own daily update check is always off (DS4_NO_UPDATE_CHECK=1): the ds4-update-check
  timer replaces it, with an ordering that knows v0.5.6.1 is newer than v0.5.6.
- The lock defaults to /run/ds4, not the engine's /tmp/ds4.lock: the unit runs with PrivateTmp=, and a
  lock in a private /tmp would not stop a second engine (a CLI smoke test) started beside the service.

All errors are gathered and raised together as LaunchConfigError, before anything is written.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
import re
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._common import digest as ds4_digest
from ansible_collections.ds4.fleet.plugins.module_utils._engine import lineage as ds4_lineage

DEFAULTS: dict[str, Any] = {
    "release_dir": None,
    "base_model": None,
    "dspark_model": None,
    "mtp_model": None,
    "speculation": "dspark",
    "lineage": "fork",
    "model_generation": "0731",
    "ctx": 524288,
    "host": "127.0.0.1",
    "port": 8000,
    "kv_disk_dir": "/var/lib/ds4/kv",
    "kv_disk_space_mb": 4096,
    "mem_floor_gb": 4,
    "extra_args": [],
    "extra_env": {},
    "lock_file": "/run/ds4/ds4.lock",
    "dist_role": None,
    "dist_layers": None,
    "dist_host": None,
    "dist_port": None,
    "vision_model": None,
    "ssd_streaming_cache_gb": None,
    "power": None,
    "builtin_mtp": False,
    "dist_mode": None,
    "dist_transport": None,
    "dist_address": None,
    "rdma_launcher": None,
    "rdma_sysfs_root": "/sys",
    "rdma_limit_memlock": "infinity",
}
DIST_ROLES = ("coordinator", "worker")
DIST_MODES = ("pipeline", "tensor")
TRANSPORTS = ("rdma", "tcp")
# The coordinator of a tensor pair serves this many sessions at once (the engine's published setup).
TENSOR_BATCHED_SESSIONS = 8
_COORDINATOR_SLICE_RE = re.compile(r"0:[0-9]+")
_WORKER_SLICE_RE = re.compile(r"[0-9]+:output")

REQUIRED = ("release_dir", "base_model")
SPECULATIONS = ("dspark", "mtp", "plain")

# Environment the launch sets itself, with what to change instead.
MANAGED_ENV = {
    "DS4_NO_UPDATE_CHECK": "the engine's own update check stays off; the ds4-update-check timer replaces it",
    "DS4_UPDATE_URL": "the engine's own update check stays off; the ds4-update-check timer has its own feed",
    "DS4_LOCK_FILE": "the service keeps its lock in its runtime directory",
    "DS4_CONT_DSPARK": "set ds4_speculation",
    "DS4_DSPARK_MODEL": "set ds4_speculation and the model settings",
    "DS4_CONT_MTP_MODE": "set ds4_speculation",
    "DS4_MEM_FLOOR_GB": "set ds4_mem_floor_gb",
    "GGUF_FILE": "the model is passed with -m from the model settings",
    "DS4_GGUF_DIR": "the model is passed with -m from the model settings",
}

# ds4-server flags the launch passes itself (or must never get), with what to change instead.
MANAGED_FLAGS = {
    "--cuda": "it is always passed",
    "-m": "the model is passed from the model settings",
    "--model": "the model is passed from the model settings",
    "-c": "set ds4_ctx",
    "--ctx": "set ds4_ctx",
    "--host": "set ds4_host",
    "--port": "set ds4_port",
    "--kv-disk-dir": "set ds4_kv_disk_dir",
    "--kv-disk-space-mb": "set ds4_kv_disk_space_mb",
    "--mem-floor-gb": "set ds4_mem_floor_gb",
    "--mtp": "set ds4_speculation",
    "--dspark": "set ds4_speculation",
    "--no-mtp": "set ds4_speculation",
    "--no-dspark": "set ds4_speculation",
    "--no-spec": "set ds4_speculation",
    "--mtp-model": "set ds4_speculation (upstream's DSpark support file comes from ds4_model_catalog)",
    "--no-update-check": "the engine's own update check is already off",
    "--check-update": "it makes ds4-server exit instead of serving",
    "--version": "it makes ds4-server exit instead of serving",
    "--help": "it makes ds4-server exit instead of serving",
    "--role": "declare the pair in ds4_pairs",
    "--layers": "declare the pair in ds4_pairs (its layers)",
    "--listen": "declare the pair in ds4_pairs (the members' link addresses)",
    "--coordinator": "declare the pair in ds4_pairs (the members' link addresses)",
    "--tensor-parallel": "declare the pair's mode in ds4_pairs",
    "--transport": "declare the pair's transport in ds4_pairs (rdma falls back to tcp by itself)",
    "--rdma-device": "the RDMA device is found at each start",
    "--rdma-gid-index": "the RoCE v2 GID index is found at each start (it moves across reboots)",
    "--ssd-streaming": "set ds4_model_family: the catalog streams the families that need it",
    "--ssd-streaming-cache-experts": "set ds4_model_family: the catalog pins each streamed family's cache",
    "--vision": "set ds4_model_family: the catalog's vision encoder (files.vision) is passed",
}
# Managed only where the family sets it: elsewhere an operator may lower the GPU load with it.
FAMILY_FLAGS = {
    "--power": ("power", "set ds4_model_family: the catalog gives the --power the family requires")
}
# Flags a tensor pair's coordinator gets, refused in ds4_extra_args there alone.
TENSOR_FLAGS = {"--batched-session": "a tensor pair's coordinator serves 8 sessions at once"}

_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_HOST_RE = re.compile(r"[A-Za-z0-9.:_][A-Za-z0-9.:_-]*")
# Characters that need no quoting in an EnvironmentFile value or an ExecStart word.
_ENV_SAFE_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_EXEC_SAFE_RE = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


class LaunchConfigError(ValueError):
    """Every problem found in the settings; str() joins them."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


# What a message calls each setting: the public variable, or what the roles derive it from.
NAMES = {
    "release_dir": "the release directory (ds4_root, ds4_release)",
    "base_model": "the base model path (ds4_gguf_dir, ds4_model_catalog)",
    "dspark_model": "the drafter path (ds4_gguf_dir, ds4_model_catalog)",
    "mtp_model": "the MTP model path (ds4_gguf_dir, ds4_model_catalog)",
    "lock_file": "the lock file",
    "dist_role": "the pair role (ds4_pairs)",
    "dist_layers": "the pair member's layers (ds4_pairs, ds4_model_catalog)",
    "dist_host": "the coordinator's link address (ds4_pairs)",
    "dist_port": "the coordinator's link port (ds4_pairs, ds4_pair_port)",
    "vision_model": "the vision encoder path (ds4_gguf_dir, ds4_model_catalog)",
    "ssd_streaming_cache_gb": "the streamed expert cache (ds4_model_catalog)",
    "power": "the family's --power (ds4_model_catalog)",
    "builtin_mtp": "the family's own MTP block (ds4_model_catalog)",
    "dist_mode": "the pair's mode (ds4_pairs)",
    "dist_transport": "the pair's transport (ds4_pairs)",
    "dist_address": "the member's own link address (ds4_pairs)",
    "rdma_launcher": "the RDMA launcher's path",
}
# The installer's rule: a name containing "-0731" is of the 0731 generation.
_0731_MARK = "-0731"


def _var(key):
    return NAMES.get(key, f"ds4_{key}")


def _whole(value, key, low, high, what, errors):
    """An int from an int or a string of ASCII digits within [low, high]; None after recording an error."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value)
    if number is None or number < low or (high is not None and number > high):
        errors.append(f"{_var(key)} must be {what}: {value!r}")
        return None
    return number


def _no_control(value, what, errors):
    if _CONTROL_RE.search(value):
        errors.append(f"{what} must not contain control characters such as a newline: {value!r}")
        return False
    return True


def _abs_path(value, key, errors, why="an absolute path"):
    if not isinstance(value, str) or not value.startswith("/"):
        errors.append(f"{_var(key)} must be {why}: {value!r}")
        return None
    if not _no_control(value, _var(key), errors):
        return None
    return posixpath.normpath(value)


def _word(value, what, errors, secret=False):
    """A string or int (as text) free of control characters; None after recording an error.

    A secret's value is never put in the message."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        errors.append(f"{what} must be a string" + ("" if secret else f": {value!r}"))
        return None
    if secret and _CONTROL_RE.search(value):
        errors.append(f"{what} must not contain control characters such as a newline")
        return None
    return value if _no_control(value, what, errors) else None


def _extra_env(value, errors):
    # Nothing of the value is shown, whatever its type: a name that is no variable name may be a secret
    # written in the wrong place ("TOKEN=..." as a name), so only the names that pass are named.
    if not isinstance(value, dict):
        errors.append(
            f"ds4_extra_env must be a mapping of variable names to strings, not a {type(value).__name__}"
        )
        return {}
    env, bad_names = {}, 0
    for name in sorted(value, key=str):
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            bad_names += 1
        elif name in MANAGED_ENV:
            errors.append(f"ds4_extra_env must not set {name}, which ds4-fleet manages: {MANAGED_ENV[name]}")
        else:
            text = _word(value[name], f"ds4_extra_env value of {name}", errors, secret=True)
            if text is not None:
                env[name] = text
    if bad_names:
        errors.append(
            "ds4_extra_env names must be UPPERCASE letters, digits and _, not starting with a digit: "
            f"{bad_names} of {len(value)} are not (not shown: one may be a secret)"
        )
    return env


def _extra_args(value, errors, family=None):
    family = family or {}
    if not isinstance(value, (list, tuple)):
        errors.append(f"ds4_extra_args must be a list of strings: {value!r}")
        return []
    args = []
    for item in value:
        text = _word(item, "ds4_extra_args items", errors)
        if text is None:
            continue
        # `--port=9000` is the same flag as `--port 9000`.
        flag = text.split("=", 1)[0] if text.startswith("--") else text
        if flag in MANAGED_FLAGS:
            errors.append(f"ds4_extra_args must not contain {text!r}: {MANAGED_FLAGS[flag]}")
        elif flag in FAMILY_FLAGS and family.get(FAMILY_FLAGS[flag][0]) is not None:
            errors.append(f"ds4_extra_args must not contain {text!r}: {FAMILY_FLAGS[flag][1]}")
        else:
            args.append(text)
    return args


def validate(settings):
    """The settings with defaults filled in and values normalised; LaunchConfigError on any problem.

    kv_disk_dir and mem_floor_gb come back as None when turned off with ''.
    """
    if not isinstance(settings, dict):
        raise LaunchConfigError([f"launch settings must be a mapping: {settings!r}"])
    errors = []
    unknown = sorted(set(settings) - set(DEFAULTS), key=str)
    if unknown:
        errors.append(f"unknown launch settings: {', '.join(map(repr, unknown))}")
    s = {key: DEFAULTS[key] if settings.get(key) is None else settings[key] for key in DEFAULTS}
    out = {
        "release_dir": _abs_path(s["release_dir"], "release_dir", errors),
        "base_model": _abs_path(s["base_model"], "base_model", errors, "an absolute path to the base GGUF"),
    }
    _models(s, out, errors)
    _listen(s, out, errors)
    _memory(s, out, errors)
    _dist(settings, out, errors)
    _rdma_host(s, out, errors)
    _family(s, out, errors)
    out["lock_file"] = _abs_path(s["lock_file"], "lock_file", errors)
    out["extra_env"] = _extra_env(s["extra_env"], errors)
    out["extra_args"] = _extra_args(s["extra_args"], errors, out)
    errors += ds4_lineage.extra_args_problems(out["lineage"], out["extra_args"])
    if out["dist_mode"] == "tensor" and out["dist_role"] == "coordinator":
        for item in out["extra_args"]:
            flag = item.split("=", 1)[0]
            if flag in TENSOR_FLAGS:
                errors.append(f"ds4_extra_args must not contain {item!r}: {TENSOR_FLAGS[flag]}")

    if errors:
        raise LaunchConfigError(errors)
    return out


def _models(s, out, errors):
    """The generation, the speculation and the model files it needs."""
    # Which generations exist, and which speculation each has files for, is the catalog's to say
    # (_weights.catalog, data in ds4_model_catalog): the launch only needs the files it is given.
    generation = s["model_generation"]
    if not isinstance(generation, str) or not generation:
        hint = ""
        if isinstance(generation, int):
            hint = " (an unquoted 0731 in YAML is a number: write '0731' in quotes)"
        errors.append(f"ds4_model_generation must be a generation name in quotes: {generation!r}{hint}")
    out["model_generation"] = generation

    speculation = s["speculation"]
    if speculation not in SPECULATIONS:
        errors.append(f"ds4_speculation must be one of {', '.join(SPECULATIONS)}: {speculation!r}")
    out["speculation"] = speculation
    lineage = s["lineage"]
    if lineage not in ds4_lineage.LINEAGES:
        errors.append(f"{ds4_lineage.VARIABLE} must be fork or upstream: {lineage!r}")
    elif lineage == ds4_lineage.UPSTREAM and speculation == "mtp" and s["builtin_mtp"] is not True:
        errors.append(
            "ds4_speculation mtp (the legacy MTP head) is the fork's launch: "
            f"{ds4_lineage.VARIABLE} upstream takes dspark or plain"
        )
    out["lineage"] = lineage
    out["dspark_model"] = out["mtp_model"] = None
    if speculation == "dspark":
        out["dspark_model"] = _abs_path(
            s["dspark_model"], "dspark_model", errors, "an absolute path to the drafter GGUF for dspark"
        )
    elif speculation == "mtp" and s["builtin_mtp"] is not True:
        out["mtp_model"] = _abs_path(
            s["mtp_model"], "mtp_model", errors, "an absolute path to the MTP GGUF for mtp"
        )


def _family(s, out, errors):
    """What the model family needs of the launch (the catalog's, through the roles): its vision encoder,
    its streamed expert cache, its --power and its own MTP block; and a drafter of its own generation."""
    out["vision_model"] = None
    if s["vision_model"] is not None:
        out["vision_model"] = _abs_path(
            s["vision_model"], "vision_model", errors, "an absolute path to the encoder"
        )
    out["ssd_streaming_cache_gb"] = out["power"] = None
    if s["ssd_streaming_cache_gb"] is not None:
        out["ssd_streaming_cache_gb"] = _whole(
            s["ssd_streaming_cache_gb"],
            "ssd_streaming_cache_gb",
            1,
            None,
            "a positive whole number of GB",
            errors,
        )
    if s["power"] is not None:
        out["power"] = _whole(s["power"], "power", 1, 100, "a percentage from 1 to 100", errors)
    if not isinstance(s["builtin_mtp"], bool):
        errors.append(f"{_var('builtin_mtp')} must be true or false: {s['builtin_mtp']!r}")
    out["builtin_mtp"] = s["builtin_mtp"] is True
    drafter, base, generation = out.get("dspark_model"), out.get("base_model"), out["model_generation"]
    # The 0731 drafter pairs only with a 0731 base (the installer's rule: a name with "-0731" is of 0731):
    # a Vision-Exp base refuses it, and the engine would not start.
    if (
        isinstance(drafter, str)
        and isinstance(base, str)
        and isinstance(generation, str)
        and _0731_MARK in posixpath.basename(drafter)
        and generation not in ("", "0731")
        and _0731_MARK not in posixpath.basename(base)
    ):
        errors.append(
            f"{_var('dspark_model')} {drafter!r} is of the 0731 generation, and the base model "
            f"{posixpath.basename(base)!r} (ds4_model_generation {generation!r}) is not: a drafter pairs "
            "only with the base of its own generation"
        )


def _listen(s, out, errors):
    """The context and where the engine listens."""
    out["ctx"] = _whole(s["ctx"], "ctx", 1, None, "a positive whole number of tokens", errors)
    out["port"] = _whole(s["port"], "port", 1, 65535, "a port number from 1 to 65535", errors)
    host = s["host"]
    # An address, never a name (issue 55): the probes, the smoke test and the watchdog ask the address a
    # name resolves to first (localhost: ::1 on Debian), while the listener proof reads one address.
    try:
        ipaddress.ip_address(host)
    except (TypeError, ValueError):
        errors.append(
            "ds4_host must be an IP address, not a name (a name may reach another address than the one "
            f"whose listener is proven: localhost is ::1 first on Debian): {host!r}"
        )
    out["host"] = host


def _memory(s, out, errors):
    """Where KV banks may spill to disk, and the memory floor."""
    out["kv_disk_dir"] = None
    out["kv_disk_space_mb"] = _whole(
        s["kv_disk_space_mb"], "kv_disk_space_mb", 1, None, "a positive whole number of MiB", errors
    )
    if s["kv_disk_dir"] != "":
        out["kv_disk_dir"] = _abs_path(
            s["kv_disk_dir"], "kv_disk_dir", errors, "an absolute path, or '' to keep KV banks off disk"
        )
    out["mem_floor_gb"] = None
    if s["mem_floor_gb"] != "":
        out["mem_floor_gb"] = _whole(
            s["mem_floor_gb"],
            "mem_floor_gb",
            0,
            None,
            "a whole number of GiB, or '' to leave the flag out",
            errors,
        )


_DIST_KEYS = ("dist_role", "dist_layers", "dist_host", "dist_port", "dist_mode", "dist_transport",
              "dist_address", "rdma_launcher")  # fmt: skip


def _dist(settings, out, errors):
    """A pair member's part: its role, mode, slice (pipeline) or transport (tensor) and the coordinator's
    address on the pair's link, all or none (ds4_pair decides them from ds4_pairs)."""
    given = {key: settings.get(key) for key in _DIST_KEYS}
    out.update(dict.fromkeys(given))
    if all(value is None for value in given.values()):
        return
    role, layers, host = given["dist_role"], given["dist_layers"], given["dist_host"]
    if role not in DIST_ROLES:
        errors.append(f"{_var('dist_role')} must be coordinator or worker: {role!r}")
        return
    mode = given["dist_mode"] or "pipeline"
    if mode not in DIST_MODES:
        errors.append(f"{_var('dist_mode')} must be pipeline or tensor: {mode!r}")
        return
    if mode == "tensor":
        _tensor(given, out, errors)
    else:
        pattern = _COORDINATOR_SLICE_RE if role == "coordinator" else _WORKER_SLICE_RE
        shape = "0:K" if role == "coordinator" else "K:output"
        if not isinstance(layers, str) or not pattern.fullmatch(layers):
            errors.append(f"{_var('dist_layers')} of a {role} must be {shape}: {layers!r}")
    if not isinstance(host, str) or not _HOST_RE.fullmatch(host):
        errors.append(f"{_var('dist_host')} must be an IP address or a host name: {host!r}")
    port = _whole(given["dist_port"], "dist_port", 1, 65535, "a port number from 1 to 65535", errors)
    out.update(dist_role=role, dist_layers=layers, dist_host=host, dist_port=port, dist_mode=mode)


def _tensor(given, out, errors):
    """The tensor mode's part: no slice, a transport, and for rdma the member's own link address and the
    launcher that finds its RDMA device at each start."""
    if given["dist_layers"] is not None:
        errors.append(f"{_var('dist_layers')} is the pipeline's; a tensor pair splits every layer")
    if out["lineage"] != ds4_lineage.UPSTREAM:
        errors.append(
            f"{_var('dist_mode')} tensor is upstream's engine (--tensor-parallel): "
            f"{ds4_lineage.VARIABLE} makes this Spark run the fork, which has no tensor mode"
        )
    transport = given["dist_transport"] or "rdma"
    if transport not in TRANSPORTS:
        errors.append(f"{_var('dist_transport')} must be rdma or tcp: {transport!r}")
    out["dist_transport"] = transport
    if transport == "rdma":
        try:
            ipaddress.ip_address(given["dist_address"])
        except (TypeError, ValueError):
            errors.append(f"{_var('dist_address')} must be an IP address: {given['dist_address']!r}")
        out["dist_address"] = given["dist_address"]
        out["rdma_launcher"] = _abs_path(given["rdma_launcher"], "rdma_launcher", errors)


def _rdma_host(s, out, errors):
    """What the host gives RDMA: where its launcher reads sysfs and the unit's locked memory. Judged in every
    mode, as a site sets them once for all its Sparks."""
    out["rdma_sysfs_root"] = _abs_path(s["rdma_sysfs_root"], "rdma_sysfs_root", errors)
    memlock = s["rdma_limit_memlock"]
    if not isinstance(memlock, str) or not _MEMLOCK_RE.fullmatch(memlock):
        errors.append(
            f"{_var('rdma_limit_memlock')} must be infinity or a number of bytes with an optional K, M, G or "
            f"T: {memlock!r}"
        )
    out["rdma_limit_memlock"] = memlock


def server_env(cfg):
    """The environment of ds4-server, in file order: managed names first, then extra_env by name."""
    env = {"DS4_NO_UPDATE_CHECK": "1", "DS4_LOCK_FILE": cfg["lock_file"]}
    if cfg["speculation"] == "dspark" and cfg["lineage"] == ds4_lineage.FORK:
        env["DS4_CONT_DSPARK"] = "1"
        env["DS4_DSPARK_MODEL"] = cfg["dspark_model"]
    elif cfg["speculation"] == "mtp" and not cfg["builtin_mtp"]:
        # The contract's launcher notes MTP mode 2 for legacy; set it only when MTP is the chosen rung,
        # beside the --mtp file, so a DSpark launch carries nothing of MTP.
        env["DS4_CONT_MTP_MODE"] = "2"
    env.update(cfg["extra_env"])
    return env


def server_args(cfg):
    """The ds4-server arguments (without the program), every item a string."""
    args = ["--cuda", "-m", cfg["base_model"], "-c", str(cfg["ctx"])]
    args += ["--host", cfg["host"], "--port", str(cfg["port"])]
    if cfg["kv_disk_dir"] is not None:
        args += ["--kv-disk-dir", cfg["kv_disk_dir"], "--kv-disk-space-mb", str(cfg["kv_disk_space_mb"])]
    if cfg["mem_floor_gb"] is not None:
        args += ["--mem-floor-gb", str(cfg["mem_floor_gb"])]
    if cfg["speculation"] == "dspark" and cfg["lineage"] == ds4_lineage.UPSTREAM:
        # Upstream's DSpark is a switch; its support GGUF rides on --mtp-model (not the fork's drafter).
        args += ["--dspark", "--mtp-model", cfg["dspark_model"]]
    elif cfg["speculation"] == "mtp":
        # GLM 5.3's MTP is a block of the model itself: the switch alone.
        args += ["--mtp"] if cfg["builtin_mtp"] else ["--mtp", cfg["mtp_model"]]
    elif cfg["speculation"] == "plain":
        args.append("--no-spec")
    # The tensor mode does not stream (engine contract): a streamed family's member holds its half of every
    # layer in memory instead, which the pair's memory check judged (_pair.declaration).
    if cfg["ssd_streaming_cache_gb"] is not None and cfg["dist_mode"] != "tensor":
        # Pinned: the engine's automatic cache pushed owners' Sparks into swap (NVRM NV_ERR_NO_MEMORY).
        args += ["--ssd-streaming", "--ssd-streaming-cache-experts", f"{cfg['ssd_streaming_cache_gb']}GB"]
    if cfg["power"] is not None:
        args += ["--power", str(cfg["power"])]
    if cfg["vision_model"] is not None:
        args += ["--vision", cfg["vision_model"]]
    if cfg["dist_mode"] == "tensor":
        return (
            args + _tensor_args(cfg) + ["--batched-session", str(TENSOR_BATCHED_SESSIONS)] + cfg["extra_args"]
        )
    if cfg["dist_role"] is not None:
        peer = "--listen" if cfg["dist_role"] == "coordinator" else "--coordinator"
        args += ["--role", cfg["dist_role"], "--layers", cfg["dist_layers"]]
        args += [peer, cfg["dist_host"], str(cfg["dist_port"])]
    return args + cfg["extra_args"]


def _tensor_args(cfg):
    """A tensor member's flags; the rdma transport's are the launcher's to append at each start."""
    peer = "--listen" if cfg["dist_role"] == "coordinator" else "--coordinator"
    args = ["--tensor-parallel", "--role", cfg["dist_role"], peer, cfg["dist_host"], str(cfg["dist_port"])]
    return args + (["--transport", "tcp"] if cfg["dist_transport"] == "tcp" else [])


def worker_args(cfg):
    """The `ds4` CLI arguments of a tensor pair's worker (the engine contract's, and ds4_extra_args)."""
    return ["--cuda", "-m", cfg["base_model"], *_tensor_args(cfg), *cfg["extra_args"]]


def tensor_worker(cfg):
    """Whether the member runs `ds4`, the CLI: a tensor pair's worker."""
    return cfg["dist_mode"] == "tensor" and cfg["dist_role"] == "worker"


def launcher_words(cfg):
    """The words before the engine's program on the unit's command line: the RDMA launcher, where the
    member's transport is rdma (it finds the device and GID index at each start, then runs the engine)."""
    if cfg["dist_mode"] != "tensor" or cfg["dist_transport"] != "rdma":
        return []
    return [
        "/usr/bin/python3", "-B", cfg["rdma_launcher"], "--address", cfg["dist_address"],
        "--root", cfg["rdma_sysfs_root"], "--",
    ]  # fmt: skip


def env_file_line(name, value):
    """`NAME=value` as systemd's EnvironmentFile= reads it (and a POSIX shell sourcing the file too).

    Plain values stay bare; anything else is double-quoted with \\ " $ ` escaped, the escapes the
    two readers share. Values never hold control characters (validated).
    """
    if _ENV_SAFE_RE.fullmatch(value):
        return f"{name}={value}"
    escaped = re.sub(r'([\\"$`])', r"\\\1", value)
    return f'{name}="{escaped}"'


def exec_word(word):
    """One word of a systemd ExecStart= line, read back by systemd as exactly `word`.

    Words outside a plain set are double-quoted with \\ and " escaped (systemd C-unescapes them);
    % and $ are doubled everywhere, since systemd expands specifiers and $VARS even inside quotes.
    """
    if not _EXEC_SAFE_RE.fullmatch(word):
        word = '"' + re.sub(r'([\\"])', r"\\\1", word) + '"'
    return word.replace("%", "%%").replace("$", "$$")


# What RDMA needs of the unit's sandbox, and nothing else needs (a tensor pair with transport rdma alone):
# the verbs device nodes (/dev/infiniband/uverbsN, the driver group "infiniband_verbs" in /proc/devices, so
# that a device numbered after a reboot is admitted too) and the connection manager's node, beside the
# GPU's under DevicePolicy=closed; and no limit on locked memory, as the engine registers its buffers with
# the NIC (ibv_reg_mr pins them). Address families need nothing new: libibverbs lists devices and resolves
# a RoCE peer's MAC address over netlink (AF_NETLINK, which the unit already allows), and the rest of its
# work is ioctl on the device nodes; AF_IB is rdma_cm's InfiniBand addressing, which RoCE over IP does
# not use.
RDMA_DEVICE_ALLOW = ("char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw")
# LimitMEMLOCK's grammar (systemd's, as ds4_limit_memlock is judged).
_MEMLOCK_RE = re.compile(r"infinity|[0-9]+[KMGT]?")


def unit_allowances(cfg):
    """What the unit allows beyond its own settings for this launch: {"device_allow": [...],
    "limit_memlock": "infinity" or None (the unit's ds4_limit_memlock)}; RDMA's only with rdma."""
    if cfg["dist_mode"] == "tensor" and cfg["dist_transport"] == "rdma":
        return {"device_allow": list(RDMA_DEVICE_ALLOW), "limit_memlock": cfg["rdma_limit_memlock"]}
    return {"device_allow": [], "limit_memlock": None}


def launch_config(settings, key=None):
    """Everything the service role needs from the settings; LaunchConfigError when they are wrong.

    Returns a dict: settings (validated, defaults filled), env (name -> value), env_lines,
    env_content (the text of /etc/ds4/ds4.env, without a header), binary, args, exec_start, unit
    (unit_allowances), and
    public: settings, env, env_lines and args with each extra_env value replaced by its digest under
    `key` (_common.digest.keyed: the Spark's key; without one, a key of this call alone, whose digests
    compare with no other call's), for whatever is shown or kept where others read it (a diff, the
    speed records).
    """
    cfg = validate(settings)
    key = key or os.urandom(ds4_digest.KEY_BYTES)
    env = server_env(cfg)
    env_lines = [env_file_line(name, value) for name, value in env.items()]
    binary = posixpath.join(cfg["release_dir"], "ds4" if tensor_worker(cfg) else "ds4-server")
    args = worker_args(cfg) if tensor_worker(cfg) else server_args(cfg)
    hidden = {name: ds4_digest.keyed(value, key) for name, value in cfg["extra_env"].items()}
    public_env = dict(env, **hidden)
    return {
        "settings": cfg,
        "env": env,
        "env_lines": env_lines,
        "env_content": "".join(line + "\n" for line in env_lines),
        "binary": binary,
        "args": args,
        "exec_start": " ".join(exec_word(word) for word in [*launcher_words(cfg), binary, *args]),
        "unit": unit_allowances(cfg),
        "public": {
            "settings": dict(cfg, extra_env=hidden),
            "env": public_env,
            "env_lines": [env_file_line(name, value) for name, value in public_env.items()],
            "args": args,
        },
    }
