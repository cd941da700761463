"""Taking ds4 off a Spark, step by step (ds4.fleet.ds4_remove): the roles' units stopped, the engine
firewall's table deleted, the paths they made removed, node_exporter's settings put back, their accounts
and the packages they installed (with what apt brought in beside them) purged, their records last. Each
step runs its commands through RUN_COMMAND(argv, environ_update=...) -> (rc, out, err), as
AnsibleModule.run_command, and changes nothing in check mode; what is decided without the host lives in
_fleet/remove.py."""

from __future__ import annotations

import grp
import os
import pwd

from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import (
    BUILD_LOGS,
    EMPTY,
    FIREWALL_TABLE,
    GROUPS,
    NODE_EXPORTER_DEFAULTS,
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
    is_build_log,
    names_text,
    orphans,
    purgeable,
    simulated_removals,
    unused_groups,
)
from ansible_collections.ds4.fleet.plugins.module_utils._host.packages import (
    dpkg_query_argv,
    every_installed,
    missing,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
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
    """The steps of a removal on this host. RUN_COMMAND and GET_BIN_PATH are AnsibleModule's (or a test's);
    CHECK: say what would go, change nothing."""

    def __init__(self, run_command, get_bin_path, check):
        self.run_command = run_command
        self.get_bin_path = get_bin_path
        self.check = check

    def run(self, argv, what, ok=(0,)):
        rc, out, err = self.run_command(argv, environ_update=APT_ENV)
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
        nft = self.get_bin_path("nft")
        family, table = FIREWALL_TABLE
        return (
            nft is not None
            and self.run([nft, "list", "table", family, table], "nft list table", ok=(0, 1))[0] == 0
        )

    def firewall(self, loaded):
        """Delete the table if it is still loaded once the units stopped; whether it was loaded."""
        if loaded and not self.check and self.firewall_table():
            family, table = FIREWALL_TABLE
            self.run([self.get_bin_path("nft"), "delete", "table", family, table], "nft delete table")
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
        rc, out, err = self.run_command(dpkg_query_argv(names), environ_update=APT_ENV)
        absent = missing(names, rc, out, err)
        return [name for name in names if name not in absent]

    def brought(self, record):
        """What apt brought in beside the recorded packages (ds4_remove.brought_in), or []."""
        if "before" not in record:
            return []
        packages = every_installed(*self.run_command(dpkg_query_argv([]), environ_update=APT_ENV))
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


def lines(result, check):
    """What a removal did (or, in check mode, would do), a line each, for the operator."""
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
