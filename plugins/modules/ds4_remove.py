#!/usr/bin/python
"""Take off a Spark what the roles made (the list and its rules: module_utils/_fleet/remove.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_remove
short_description: Take off a Spark everything the ds4 roles made
description:
  - Stops and disables the roles' units, deletes the engine firewall's nftables table, removes the units,
    drop-ins, timers' stamps, log rotation, facts, helpers, releases, logs, state, KV banks and the roles'
    records, writes back node_exporter's settings as the distribution had them, and deletes the service
    and build users and their groups, and the GPU device groups the roles made (their record,
    /var/lib/ds4-fleet/groups.json) that no other user is in. The one list of what goes is
    module_utils/_fleet/remove.py.
  - Takes off a pair's link file, /etc/netplan/60-ds4-pair-link.yaml (C(ds4_pair_link_manage)), and then
    only has C(netplan generate) and C(netplan apply) the files left.
  - Every path is walked from / without following a link (a link at a component above a path is refused);
    a link the roles made (current, previous, a weight file used in place) is removed itself.
  - A directory the operator named (O(gguf_dir), O(kv_dir), O(build_log_dir) outside the roles' own
    directories) stays; only what the roles put in it goes.
  - The weights stay unless O(weights); the packages the roles installed (their record,
    /var/lib/ds4-fleet/packages.json) stay unless O(packages), and then only those whose purge takes no other
    package along; the record keeps those still installed.
  - In check mode it reports what would go and changes nothing.
  - Run it on a drained Spark (playbooks/remove.yml).
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  root:
    description: The releases' directory (C(ds4_root)).
    type: path
    required: true
  gguf_dir:
    description: The weights directory (C(ds4_gguf_dir)).
    type: path
    required: true
  kv_dir:
    description: The KV banks' directory (C(ds4_kv_disk_dir)); empty for none.
    type: str
    default: /var/lib/ds4/kv
  build_log_dir:
    description: Where the engine's build logs are (C(ds4_engine_build_log_dir)).
    type: path
    default: /var/log/ds4
  textfile_dir:
    description: node_exporter's textfile directory (C(ds4_node_exporter_textfile_dir)); only the
      watchdog's C(ds4.prom) goes from it.
    type: path
    default: /var/lib/prometheus/node-exporter
  catalog:
    description: The model catalog (C(ds4_model_catalog)); with O(weights), each of its files and the files
      beside it go from O(gguf_dir).
    type: dict
    default: {}
  weights:
    description: Whether the weights go too.
    type: bool
    default: false
  packages:
    description: Whether the packages the roles installed go too (purged), those that take nothing else along.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Take ds4 off the Spark, keeping the weights and packages
  ds4.fleet.ds4_remove:
    root: /opt/ds4
    gguf_dir: /var/lib/ds4/gguf
    kv_dir: /var/lib/ds4/kv
  register: __ds4_removed
"""

RETURN = r"""
serving:
  description: Whether ds4.service was active when the module started.
  returned: always
  type: bool
units:
  description: The roles' units stopped and disabled (or to be, in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: The paths removed (or to be); a directory named alone when all of it went.
  returned: always
  type: list
  elements: str
accounts:
  description: The users and groups deleted (or to be), as C(user NAME) and C(group NAME).
  returned: always
  type: list
  elements: str
firewall:
  description: Whether the engine firewall's table was deleted (or is to be).
  returned: always
  type: bool
restored:
  description: The files written back as they were before the roles (node_exporter's settings).
  returned: always
  type: list
  elements: str
groups_kept:
  description: The device groups the roles made that stay, each with why (another user is in it).
  returned: always
  type: dict
packages:
  description: The packages purged (or to be).
  returned: always
  type: list
  elements: str
packages_kept:
  description: The packages the roles installed that stay, each with why.
  returned: always
  type: dict
lines:
  description: What went (or would go), one line each, for the operator.
  returned: always
  type: list
  elements: str
"""

import grp  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import (  # noqa: E402
    BUILD_LOGS,
    EMPTY,
    FIREWALL_TABLE,
    GROUPS,
    GROUPS_RECORD,
    NODE_EXPORTER_DEFAULTS,
    NODE_EXPORTER_DROPIN,
    NODE_EXPORTER_SAVED,
    NODE_EXPORTER_UNIT,
    OWNED,
    PACKAGES_RECORD,
    RECORDS_DIR,
    SERVICE_USER,
    UNIT_DIR,
    UNITS,
    USERS,
    RemoveError,
    brought_in,
    catalog_names,
    is_build_log,
    made,
    names_of,
    names_text,
    orphans,
    purgeable,
    read_names,
    read_record,
    simulated_removals,
    take_off_netplan,
    unused_groups,
)
from ansible_collections.ds4.fleet.plugins.module_utils._host.packages import (  # noqa: E402
    PackagesError,
    dpkg_query_argv,
    every_installed,
    missing,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (  # noqa: E402
    UnsafePath,
    disown,
    read_text,
    remove,
    replace_file,
)

APT_ENV = {"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}


def _owned_by(uid):
    """remove()'s select for entries that `uid` owns."""

    def select(_name, st):
        return st.st_uid == uid

    return select


def _build_log(name, _st):
    """remove()'s select for the engine's build logs."""
    return is_build_log(name)


class Remover:
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode

    def run(self, argv, what, ok=(0,)):
        rc, out, err = self.module.run_command(argv, environ_update=APT_ENV)
        if rc not in ok:
            raise RemoveError(f"{what} failed (exit {rc}): {(err or out).strip()}")
        return rc, out

    def units(self):
        present = [unit for unit in UNITS if os.path.lexists(f"{UNIT_DIR}/{unit}")]
        for unit in present if not self.check else []:
            self.run(["systemctl", "disable", "--now", unit], f"systemctl disable --now {unit}")
        return present

    def firewall_table(self):
        """Whether the engine firewall's table is loaded (asked before its unit stops, which deletes it)."""
        nft = self.module.get_bin_path("nft")
        family, table = FIREWALL_TABLE
        return (
            nft is not None
            and self.run([nft, "list", "table", family, table], "nft list table", ok=(0, 1))[0] == 0
        )

    def firewall(self, loaded):
        """Delete the table if it is still loaded once the units stopped; whether it was loaded."""
        if loaded and not self.check and self.firewall_table():
            family, table = FIREWALL_TABLE
            self.run([self.module.get_bin_path("nft"), "delete", "table", family, table], "nft delete table")
        return loaded

    def paths(self, plan, gone):
        removed = []
        service_uid = _uid(SERVICE_USER)
        for how, path, keep in plan:
            if path == RECORDS_DIR:
                # Last, by records(): the packages record may stay.
                continue
            select = None
            if how == OWNED:
                if service_uid is None:
                    continue
                select = _owned_by(service_uid)
            elif how == BUILD_LOGS:
                select = _build_log
            removed += remove(path, keep, gone, self.check, select=select, empty_only=how == EMPTY)
            if how == OWNED:
                # The directory stays (the operator named it), but not the deleted uid's (issue 40).
                removed += [f"{taken} (given to root)" for taken in disown(path, service_uid, self.check)]
        return removed

    def node_exporter_defaults(self, saved, dropin_gone):
        """node_exporter's settings written back as the distribution had them (SAVED), and the exporter
        restarted on them when they, or its drop-in (DROPIN_GONE: removed with the roles' paths), changed:
        systemd reads the unit again first, as the drop-in's ExecStart named a script that is gone."""
        restore = saved is not None and read_text(NODE_EXPORTER_DEFAULTS) != saved
        if not self.check:
            if restore:
                replace_file(NODE_EXPORTER_DEFAULTS, saved.encode(), 0o644, 0, 0)
            if dropin_gone:
                self.run(["systemctl", "daemon-reload"], "systemctl daemon-reload")
            if restore or dropin_gone:
                self.run(
                    ["systemctl", "try-restart", NODE_EXPORTER_UNIT],
                    f"systemctl try-restart {NODE_EXPORTER_UNIT}",
                )
        return [NODE_EXPORTER_DEFAULTS] if restore else []

    def accounts(self, device_groups):
        """The roles' users and groups deleted, then the device groups they made that nobody uses now."""
        gone = []
        for user in USERS:
            if _uid(user) is not None:
                if not self.check:
                    self.run(["userdel", user], f"userdel {user}")
                gone.append(f"user {user}")
        for group in GROUPS:
            # userdel takes the user's own group with it; one left (or another's) goes by itself.
            if _gid(group) is not None:
                if not self.check:
                    self.run(["groupdel", group], f"groupdel {group}")
                gone.append(f"group {group}")
        # In check mode the roles' users still stand: they are counted as gone.
        ours = set(USERS)
        members = {entry.gr_name: set(entry.gr_mem) - ours for entry in grp.getgrall()}
        primary = {_group_name(entry.pw_gid) for entry in pwd.getpwall() if entry.pw_name not in ours}
        delete, kept = unused_groups(device_groups, members, primary)
        for group in delete:
            if not self.check:
                self.run(["groupdel", group], f"groupdel {group}")
            gone.append(f"group {group}")
        return gone, kept

    def installed(self, names):
        if not names:
            return []
        rc, out, err = self.module.run_command(dpkg_query_argv(names), environ_update=APT_ENV)
        absent = missing(names, rc, out, err)
        return [name for name in names if name not in absent]

    def brought(self, record):
        """What apt brought in beside the recorded packages (ds4_remove.brought_in), or []."""
        if "before" not in record:
            return []
        packages = every_installed(*self.module.run_command(dpkg_query_argv([]), environ_update=APT_ENV))
        automatic = self.run(["apt-mark", "showauto"], "apt-mark showauto")[1].split()
        return brought_in(record, packages, automatic) or []

    def packages(self, record, recorded, wanted):
        installed = self.installed(recorded)
        if not wanted:
            return [], {name: "ds4_remove_packages is false" for name in installed}, installed
        installed += self.brought(record)

        def simulate(names):
            return simulated_removals(
                self.run(["apt-get", "--simulate", "purge", *names], "apt-get --simulate purge")[1]
            )

        chosen, kept = purgeable(installed, simulate)
        if chosen:
            # What apt pulled in with them and nothing else needs goes too; what was unneeded before stays.
            before = simulated_removals(
                self.run(["apt-get", "--simulate", "autoremove"], "apt-get --simulate autoremove")[1]
            )
            chosen += orphans(chosen, simulate(["--auto-remove", *chosen]), before)
        if chosen and not self.check:
            self.run(["apt-get", "purge", "--yes", *chosen], "apt-get purge")
        return chosen, kept, list(kept)

    def records(self, record, left, gone):
        """The roles' records go; the packages record keeps the packages the roles installed (or apt brought
        in beside them) that stay."""
        if not left:
            return remove(RECORDS_DIR, (), gone, self.check)
        removed = remove(RECORDS_DIR, (PACKAGES_RECORD,), gone, self.check)
        if sorted(set(left)) != sorted(set(record.get("packages", []))):
            if not self.check:
                replace_file(PACKAGES_RECORD, names_text(left, doc=record).encode(), 0o600)
            removed.append(f"{PACKAGES_RECORD} (of the packages that go)")
        return removed


def _uid(name):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _gid(name):
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def _lines(result, check):
    verb = "would go" if check else "gone"
    lines = [f"unit {unit}: stopped and disabled, {verb}" for unit in result["units"]]
    if result["firewall"]:
        lines.append(f"nftables table {' '.join(FIREWALL_TABLE)}: {verb}")
    lines += [f"{path}: {verb}" for path in result["removed"]]
    lines += [
        f"{path}: {'would be put' if check else 'put'} back as it was before ds4"
        for path in result["restored"]
    ]
    lines += [f"{account}: {verb}" for account in result["accounts"]]
    lines += [f"group {name}: stays, {why}" for name, why in sorted(result["groups_kept"].items())]
    lines += [f"package {name}: {verb} (purged)" for name in result["packages"]]
    lines += [f"package {name}: stays, {why}" for name, why in sorted(result["packages_kept"].items())]
    return lines or ["nothing of ds4 is left on this Spark"]


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "gguf_dir": {"type": "path", "required": True},
            "kv_dir": {"type": "str", "default": "/var/lib/ds4/kv"},
            "build_log_dir": {"type": "path", "default": "/var/log/ds4"},
            "textfile_dir": {"type": "path", "default": "/var/lib/prometheus/node-exporter"},
            "catalog": {"type": "dict", "default": {}},
            "weights": {"type": "bool", "default": False},
            "packages": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    remover = Remover(module)
    try:
        names = catalog_names(p["catalog"])
        plan = made(
            p["root"], p["gguf_dir"], p["kv_dir"], p["build_log_dir"], names, p["weights"], p["textfile_dir"]
        )
        # Read before anything goes: both live in the records' directory, which goes last.
        record = read_record(read_text(PACKAGES_RECORD))
        recorded = names_of(record)
        device_groups = read_names(read_text(GROUPS_RECORD), "groups", GROUPS_RECORD)
        saved = read_text(NODE_EXPORTER_SAVED)
        serving = module.run_command(["systemctl", "is-active", "--quiet", "ds4.service"])[0] == 0
        gone = set()
        loaded = remover.firewall_table()
        result = {"serving": serving, "units": remover.units()}
        result["firewall"] = remover.firewall(loaded)
        result["removed"] = remover.paths(plan, gone)
        result["removed"] += take_off_netplan(
            module.get_bin_path("netplan"), remover.run, module.check_mode, gone
        )
        result["restored"] = remover.node_exporter_defaults(saved, NODE_EXPORTER_DROPIN in result["removed"])
        result["accounts"], result["groups_kept"] = remover.accounts(device_groups)
        result["packages"], result["packages_kept"], left = remover.packages(record, recorded, p["packages"])
        result["removed"] += remover.records(record, left, gone)
        if result["units"] and not module.check_mode:
            remover.run(["systemctl", "daemon-reload"], "systemctl daemon-reload")
    except (RemoveError, UnsafePath, PackagesError, OSError) as exc:
        module.fail_json(msg=f"ds4 could not be removed from this Spark: {exc}")
    changed = any(result[key] for key in ("units", "firewall", "removed", "restored", "accounts", "packages"))
    module.exit_json(changed=changed, lines=_lines(result, module.check_mode), **result)


if __name__ == "__main__":
    main()
