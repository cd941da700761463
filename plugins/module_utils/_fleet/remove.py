"""What the roles make on a Spark, in one list, and the rules by which playbooks/remove.yml takes it off again
(issue 28). The module ds4_remove runs the list on the Spark; the filter remove_refusals decides, on the
controller, which Spark may not be removed because it is the last one serving behind a gateway.

- `made(...)`: every path the roles make, each with how it goes: a whole tree, a file or link, a directory
  only when empty, or the entries of a directory the operator named that belong to the service user. A
  directory the operator named (ds4_gguf_dir, ds4_kv_disk_dir, ds4_engine_build_log_dir outside the roles'
  own directories) never goes itself: only what the roles put in it. Weights go only when asked.
- `UNITS`, `USERS`, `GROUPS`, `FIREWALL_TABLE`: the units, accounts and nftables table the roles make.
- Packages: `PACKAGES_RECORD` lists those the roles installed (ds4_packages_missing records each it finds
  missing, before the role's apt task) and, once, every package installed before (`brought_in` tells what
  apt brought in beside them); `purgeable` keeps those whose removal would take anything else.
- Groups: `GROUPS_RECORD` lists the device groups the roles made (video, render where the system lacked
  them); `unused_groups` deletes those nobody uses once the roles' users are gone.
- `refusals`: a Spark that serves behind a gateway where no Spark outside the run serves stays, unless forced.
- `take_off_netplan`: a pair's link file (ds4_pair_link_manage), and netplan told when it went.

tests/unit/plugins/module_utils/_fleet/test_remove.py holds this list to the roles' tasks, templates and vars.
"""

from __future__ import annotations

import json
import posixpath

from ansible_collections.ds4.fleet.plugins.module_utils._pair.link import NETPLAN_FILE
from ansible_collections.ds4.fleet.plugins.module_utils._run.settings import directory_problems
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
    private_dir,
    read_text,
    remove,
    replace_file,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import companion_names

# How a path goes: all of it; one file or link; a directory once nothing is left in it; the entries of a
# directory the operator named that belong to the service user (the KV banks outside the state directory);
# the engine's build logs in a log directory the operator named.
TREE, FILE, EMPTY, OWNED, BUILD_LOGS = "tree", "file", "empty", "owned", "build_logs"

UNIT_DIR = "/etc/systemd/system"
# Stopped and disabled in this order (the engine first: the firewall's unit is bound to it). A pair's worker
# runs the engine as ds4-worker.service (ds4_common's _ds4_engine_unit), from ds4.service's template.
UNITS = (
    "ds4.service",
    "ds4-worker.service",
    "ds4-watchdog.timer",
    "ds4-watchdog.service",
    "ds4-update-check.timer",
    "ds4-update-check.service",
    "ds4-log.service",
    "ds4-nvidia-devices.service",
    "ds4-firewall.service",
)
SERVICE_USER = "ds4"
BUILD_USER = "ds4-build"
USERS = (SERVICE_USER, BUILD_USER)
# ds4's own group (ds4_service) and the build user's, which useradd makes with it.
GROUPS = ("ds4", "ds4-build")
FIREWALL_TABLE = ("inet", "ds4_engine")

STATE_DIR = "/var/lib/ds4"
LOG_DIR = "/var/log/ds4"
RECORDS_DIR = "/var/lib/ds4-fleet"
PACKAGES_RECORD = f"{RECORDS_DIR}/packages.json"
# The GPU device groups ds4_service made where the system lacked them (ds4_groups_missing records them).
GROUPS_RECORD = f"{RECORDS_DIR}/groups.json"
# node_exporter's settings as the distribution had them before ds4_service wrote its own (ds4_service
# keeps the first it finds); written back by the removal.
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
NODE_EXPORTER_SAVED = f"{RECORDS_DIR}/prometheus-node-exporter.default"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
# ds4_service's drop-in that runs node_exporter through ds4-node-exporter (its default route's address).
NODE_EXPORTER_DROPIN = f"/etc/systemd/system/{NODE_EXPORTER_UNIT}.d/ds4-fleet-listen.conf"
# node_exporter's textfile directory as the distribution's package makes it (ds4_node_exporter_textfile_dir).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
FACTS_DIR = "/etc/ansible/facts.d"
FACTS = ("ds4.fact", "ds4_perf.fact", "ds4_weights.fact", "ds4_update.fact", "ds4_verify.fact")


class RemoveError(ValueError):
    """A setting the removal cannot work from."""


def within(path, directory):
    """Whether `path` is `directory` or lies below it (both normalised absolute paths)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _checked(name, path):
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or posixpath.normpath(path) != path
        or path == "/"
    ):
        raise RemoveError(f"{name} must be a normalised absolute path other than /: {path!r}")
    return path


def made(root, gguf_dir, kv_dir, build_log_dir, weight_names, weights=False, textfile_dir=TEXTFILE_DIR):
    """Every path the roles make on a Spark, in the order it goes: [(how, path, keep)], `keep` the paths
    below it that stay. ds4_root, ds4_gguf_dir, ds4_kv_disk_dir ("" for none), ds4_engine_build_log_dir and
    ds4_node_exporter_textfile_dir as set; `weight_names` every model file name of the catalog; `weights`
    whether they go too."""
    root = _checked("ds4_root", root)
    gguf_dir = _checked("ds4_gguf_dir", gguf_dir)
    build_log_dir = _checked("ds4_engine_build_log_dir", build_log_dir)
    kv_dir = _checked("ds4_kv_disk_dir", kv_dir) if kv_dir else ""
    textfile_dir = _checked("ds4_node_exporter_textfile_dir", textfile_dir)
    # The roles' own rules for these directories (issue 40): a setting they would refuse is never acted on,
    # whatever the inventory says now (a system directory would lose what the service user owns in it).
    refused = directory_problems(
        {
            "ds4_root": root,
            "ds4_gguf_dir": gguf_dir,
            "ds4_kv_disk_dir": kv_dir,
            "ds4_engine_build_log_dir": build_log_dir,
            "ds4_node_exporter_textfile_dir": textfile_dir,
        }
    )
    if refused:
        raise RemoveError("; ".join(refused))
    paths = [(FILE, f"{UNIT_DIR}/{unit}", ()) for unit in UNITS]
    paths += [
        (FILE, f"{UNIT_DIR}/ds4.service.d/00-ds4-fleet-supervision.conf", ()),
        (FILE, f"{UNIT_DIR}/ds4.service.d/00-ds4-fleet-firewall.conf", ()),
        (EMPTY, f"{UNIT_DIR}/ds4.service.d", ()),
        (FILE, f"{UNIT_DIR}/ds4-worker.service.d/00-ds4-fleet-supervision.conf", ()),
        (EMPTY, f"{UNIT_DIR}/ds4-worker.service.d", ()),
        (FILE, NODE_EXPORTER_DROPIN, ()),
        (EMPTY, posixpath.dirname(NODE_EXPORTER_DROPIN), ()),
        (FILE, f"{UNIT_DIR}/nftables.service.d/ds4-engine-firewall.conf", ()),
        (EMPTY, f"{UNIT_DIR}/nftables.service.d", ()),
        # systemd's record of the update check's last run (Persistent=true).
        (FILE, "/var/lib/systemd/timers/stamp-ds4-update-check.timer", ()),
        (FILE, "/etc/logrotate.d/ds4", ()),
        (FILE, "/etc/ds4-engine.nft", ()),
        # The engine gate's settings and its lock (_spark.engine_gate; the script: /usr/local/lib/ds4).
        (FILE, "/etc/ds4-engine-gate.json", ()),
        (FILE, "/run/ds4-engine-gate.lock", ()),
        (TREE, "/etc/ds4", ()),
        *[(FILE, f"{FACTS_DIR}/{fact}", ()) for fact in FACTS],
        (EMPTY, FACTS_DIR, ()),
        (EMPTY, posixpath.dirname(FACTS_DIR), ()),
        (TREE, "/usr/local/lib/ds4", ()),
        (FILE, f"{root}/current", ()),
        (FILE, f"{root}/previous", ()),
        (TREE, f"{root}/releases", ()),
        (EMPTY, root, ()),
        # The watchdog's file alone: the directory is node_exporter's (a site's own, or the package's).
        (FILE, f"{textfile_dir}/ds4.prom", ()),
        (FILE, "/run/ds4-weights-peer-serve.stop", ()),
        (FILE, "/run/ds4-weights-peer-serve.ready", ()),
        (FILE, "/run/ds4-weights.heartbeat", ()),
        # The engine's working directory (CacheDirectory=ds4): the service user's, and systemd keeps it.
        (TREE, "/var/cache/ds4", ()),
        # The engine's runtime directory (its lock): systemd removes it when ds4.service stops.
        (TREE, "/run/ds4", ()),
    ]
    if weights:
        paths += [
            (FILE, posixpath.join(gguf_dir, name), ())
            for base in weight_names
            for name in companion_names(base)
        ]
        if within(gguf_dir, STATE_DIR) and gguf_dir != STATE_DIR:
            paths.append((EMPTY, gguf_dir, ()))
    if kv_dir and not within(kv_dir, STATE_DIR):
        paths.append((OWNED, kv_dir, ()))
    # The state directory is the roles' own (the service user's home); the weights in it stay unless asked.
    kept = () if weights or not within(gguf_dir, STATE_DIR) else (gguf_dir,)
    paths.append((TREE, STATE_DIR, kept))
    if not within(build_log_dir, LOG_DIR):
        paths.append((BUILD_LOGS, build_log_dir, ()))
    paths.append((TREE, LOG_DIR, ()))
    # Last, once the packages record and node_exporter's settings kept there are read: the roles' records
    # (the run record, the last good release, the tags' commits, the digest key). The packages record stays
    # while packages it names do (the module says which).
    paths.append((TREE, RECORDS_DIR, ()))
    return paths


def take_off_netplan(netplan, run, check_mode, gone=None, path=NETPLAN_FILE):
    """Remove the pair's netplan file (ds4_pair_link writes it where ds4_pair_link_manage is on),
    walked without following links; when it went, have `netplan` (its path; None on a host without it)
    generate and apply what is left, so that the link loses the pair's address now rather than at the next
    boot. `run(argv, what)` runs a command and raises RemoveError when it fails. Returns the paths removed
    (in check mode, that would be)."""
    removed = remove(path, (), gone, check_mode)
    if removed and netplan and not check_mode:
        run([netplan, "generate"], "netplan generate")
        run([netplan, "apply"], "netplan apply")
    return removed


def catalog_names(catalog):
    """Every model file name of ds4_model_catalog, each once, in order."""
    names = []
    for generation in (catalog or {}).values():
        for entry in (generation or {}).get("files", {}).values():
            name = (entry or {}).get("name")
            if name and name not in names:
                if "/" in name or name in (".", ".."):
                    raise RemoveError(f"ds4_model_catalog names a file {name!r} that is no plain file name")
                names.append(name)
    return names


def is_build_log(name):
    """The engine's build log (build-RELEASE.log) or its progress file (.build-RELEASE.progress.json)."""
    return (name.startswith("build-") and name.endswith(".log")) or (
        name.startswith(".build-") and name.endswith(".progress.json")
    )


def read_record(text, path=PACKAGES_RECORD):
    """A record's document (None: no record): {"packages": [names], "before": [names]} for packages,
    {"groups": [names]} for groups."""
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RemoveError(f"{path} is not a record: {exc}") from exc
    if not isinstance(doc, dict):
        raise RemoveError(f"{path} is not a record: not a mapping")
    return doc


def names_of(doc, key="packages", path=PACKAGES_RECORD):
    """The names under KEY of a record's document (read_record)."""
    names = doc.get(key, [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise RemoveError(f"{path} is not a record of {key}: its {key} are not a list of names")
    return names


def read_names(text, key="packages", path=PACKAGES_RECORD):
    """The names under KEY of a record's text (None: no record)."""
    return names_of(read_record(text, path), key, path)


def record_text(doc):
    """A record's text: each list of names sorted, each name once."""
    return json.dumps({key: sorted(set(names)) for key, names in doc.items()}, indent=1) + "\n"


def names_text(names, key="packages", doc=None):
    """The text of the record DOC (none: an empty one) with KEY's names replaced by `names`."""
    return record_text({**(doc or {}), key: names})


def record_names(names, path=PACKAGES_RECORD, key="packages", before=None):
    """Add `names` to the record at `path` (in root's 0700 directory, written whole, never through a link),
    and for the packages record, the packages installed before the roles installed any (`before()`, asked
    only when the record has none yet: what apt brings in beside the roles' packages is told from it at
    removal); whether the record changed."""
    if not names and before is None:
        return False
    if not private_dir(posixpath.dirname(path)):
        raise RemoveError(
            f"{posixpath.dirname(path)} is not a directory of root's alone: no record kept there"
        )
    doc = read_record(read_text(path), path)
    have = names_of(doc, key, path)
    after = sorted(set(have) | set(names))
    baseline = before is not None and "before" not in doc
    if after == sorted(set(have)) and not baseline:
        return False
    doc = {**doc, key: after, **({"before": before()} if baseline else {})}
    replace_file(path, record_text(doc).encode(), 0o600)
    return True


def record_missing(names, path, check_mode, key="packages", before=None):
    """What ds4_packages_missing and ds4_groups_missing do with `record`: add the missing `names` (and the
    packages installed before, see record_names) to the record at `path` (none: no record), never in check
    mode; whether the record changed."""
    return bool(path) and not check_mode and record_names(names, path, key, before)


def brought_in(doc, installed, automatic):
    """The packages apt brought in beside those the roles named, by the packages record DOC: installed now
    (`installed`), installed automatically (`automatic`, apt-mark showauto), and not installed before the
    roles installed any. None where the record does not say what was installed before (written by an older
    ds4-fleet)."""
    if not isinstance(doc.get("before"), list):
        return None
    return sorted(set(installed) & set(automatic) - set(doc["before"]) - set(doc.get("packages", [])))


def unused_groups(recorded, members, primary):
    """Of the `recorded` groups the roles made, those nobody uses once the roles' users are gone: `members`
    (group -> its member users) and `primary` (the groups that are a user's primary one). Returns (to delete,
    kept: {name: why})."""
    delete, kept = [], {}
    for name in recorded:
        if name not in members:
            continue
        if members[name]:
            kept[name] = f"its members {', '.join(sorted(members[name]))} use it"
        elif name in primary:
            kept[name] = "it is a user's primary group"
        else:
            delete.append(name)
    return delete, kept


def simulated_removals(stdout):
    """The packages apt-get --simulate purge (or remove) says it would take: its `Purg NAME` and `Remv NAME`
    lines."""
    names = []
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in ("Purg", "Remv"):
            names.append(fields[1].split(":", 1)[0])
    return names


def purgeable(candidates, simulate):
    """Those of `candidates` that can go without taking any other package along: `simulate(names)` returns
    what apt would remove with them. Each is asked alone, then those left together; a candidate that would
    take another package stays. Returns (to purge, kept: {name: why})."""
    chosen, kept = [], {}
    for name in candidates:
        others = sorted({other for other in simulate([name]) if other not in candidates})
        if others:
            kept[name] = f"removing it would also remove {', '.join(others)}"
        else:
            chosen.append(name)
    if chosen:
        others = sorted({other for other in simulate(chosen) if other not in chosen})
        if others:
            kept.update(
                {name: f"removing them together would also remove {', '.join(others)}" for name in chosen}
            )
            chosen = []
    return chosen, kept


def orphans(chosen, taken_with_auto_remove, autoremovable_before):
    """The packages that purging `chosen` leaves unneeded, pulled in with them (apt-get --simulate purge
    --auto-remove takes them and those another removal left unneeded before, `autoremovable_before`,
    which stay: they are not ours)."""
    return sorted(set(taken_with_auto_remove) - set(chosen) - set(autoremovable_before))


def refusals(host, removing, servers_by_gateway, force=False):
    """Why `host` may not be removed: a line for each gateway (name -> its servers as ds4_gateway_server
    reads them) where it serves and no Spark outside `removing` (the Sparks of this run) serves; none when
    forced."""
    if force:
        return []
    problems = []
    for gateway, servers in sorted(servers_by_gateway.items()):
        mine = [server for server in servers if server.get("name") == host]
        if not mine or not mine[0].get("up"):
            continue
        others = [
            server["name"] for server in servers if server.get("up") and server.get("name") not in removing
        ]
        if not others:
            problems.append(
                f"{host} is the last Spark serving behind the gateway {gateway}: no Spark outside this run "
                "serves there, so removing it leaves the gateway with none. Remove it anyway with "
                "-e ds4_remove_force=true."
            )
    return problems
