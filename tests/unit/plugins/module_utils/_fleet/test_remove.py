"""module_utils/_fleet/remove.py: the one list of what the roles make on a Spark (held to the roles' tasks,
templates and vars), the packages the removal may purge, and the last Spark serving behind a gateway."""

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._fleet import remove as ds4_remove
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import (
    BUILD_LOGS,
    EMPTY,
    FILE,
    OWNED,
    STATE_DIR,
    TREE,
    UNITS,
    RemoveError,
    brought_in,
    catalog_names,
    made,
    names_text,
    orphans,
    purgeable,
    read_names,
    read_record,
    record_missing,
    record_names,
    refusals,
    simulated_removals,
    unused_groups,
    within,
)

ROOT = Path(__file__).resolve().parents[5]
ROLES = ROOT / "roles"
CATALOG = yaml.safe_load((ROLES / "ds4_common" / "defaults" / "main.yml").read_text())["ds4_model_catalog"]
NAMES = catalog_names(CATALOG)


def plan(gguf_dir="/var/lib/ds4/gguf", kv_dir="/var/lib/ds4/kv", build_log_dir="/var/log/ds4", weights=False):
    return made("/opt/ds4", gguf_dir, kv_dir, build_log_dir, NAMES, weights)


def covered(path, entries):
    """Whether `path` goes with the plan: named, or below a tree (and not kept), or picked in a directory."""
    for how, where, keep in entries:
        if path == where:
            return True
        if (
            how in (TREE, OWNED, BUILD_LOGS)
            and within(path, where)
            and not any(within(path, k) for k in keep)
        ):
            return True
    return False


# --- the list ---------------------------------------------------------------------------------------------


def test_the_catalog_names_every_model_file_once():
    # Every family's files (issue 53): a removal takes any family's weights.
    assert len(NAMES) == len(set(NAMES)) == 14
    assert "DeepSeek-V4-Flash-Vision-Encoder.gguf" in NAMES and "DeepSeek-V4.1-Flash-Q2.gguf" in NAMES
    assert "DSpark-drafter-Q2K-Q8-0731.gguf" in NAMES
    assert "DeepSeek-V4-Flash-DSpark-support-0731.gguf" in NAMES
    with pytest.raises(RemoveError, match="no plain file name"):
        catalog_names({"x": {"files": {"base": {"name": "../etc/passwd"}}}})


def test_weights_stay_unless_asked_and_the_state_directory_keeps_them():
    entries = plan()
    assert not covered("/var/lib/ds4/gguf/" + NAMES[0], entries)
    assert covered("/var/lib/ds4/watchdog.json", entries)
    assert covered("/var/lib/ds4/kv/bank-0", entries)
    asked = plan(weights=True)
    for name in NAMES:
        for companion in (name, f"{name}.part", f".{name}.verified.json", f".{name}.part.json"):
            assert covered(f"/var/lib/ds4/gguf/{companion}", asked), companion


def test_a_weights_directory_the_operator_named_loses_only_the_files_the_roles_fetched():
    entries = plan(gguf_dir="/srv/ds4-models", weights=True)
    assert covered(f"/srv/ds4-models/{NAMES[0]}", entries)
    assert not covered("/srv/ds4-models", entries)
    assert not covered("/srv/ds4-models/their-own.gguf", entries)
    assert all(how == FILE for how, path, _ in entries if within(path, "/srv/ds4-models"))
    assert not any(within("/srv/ds4-models", path) for how, path, _ in entries if how != FILE)


def test_of_a_sites_textfile_directory_only_the_watchdogs_file_goes():
    entries = made("/opt/ds4", "/var/lib/ds4/gguf", "", "/var/log/ds4", NAMES, textfile_dir="/srv/textfiles")
    assert ("file", "/srv/textfiles/ds4.prom", ()) in entries
    assert not [path for _, path, _ in entries if path == "/srv/textfiles"]


def test_a_kv_directory_or_build_log_directory_the_operator_named_stays_itself():
    entries = plan(kv_dir="/srv/ds4/kv", build_log_dir="/srv/ds4/logs")
    assert (OWNED, "/srv/ds4/kv", ()) in entries
    assert (BUILD_LOGS, "/srv/ds4/logs", ()) in entries
    assert ds4_remove.is_build_log("build-v0.6.5.log") and ds4_remove.is_build_log(
        ".build-v0.6.5.progress.json"
    )
    assert not ds4_remove.is_build_log("syslog")


def test_the_engines_cache_directory_goes_with_the_service_user():
    # CacheDirectory=ds4 in ds4.service: systemd makes it the service user's, and it outlives the unit.
    assert (TREE, "/var/cache/ds4", ()) in plan()


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("ds4_kv_disk_dir", {"kv_dir": "/etc"}),
        ("ds4_kv_disk_dir", {"kv_dir": "/srv/www"}),
        ("ds4_kv_disk_dir", {"kv_dir": "/var/lib/ds4/rollback"}),
        ("ds4_engine_build_log_dir", {"build_log_dir": "/var/log"}),
        ("ds4_engine_build_log_dir", {"build_log_dir": "/usr/share/doc"}),
        ("ds4_gguf_dir", {"gguf_dir": "/usr/lib"}),
        ("ds4_node_exporter_textfile_dir", {"textfile_dir": "/etc/cron.d"}),
        ("ds4_root", {"root": "/usr"}),
        ("ds4_kv_disk_dir", {"kv_dir": "/srv/ds4", "gguf_dir": "/srv/ds4/gguf"}),
    ],
)
def test_a_directory_setting_the_roles_would_refuse_is_refused_by_the_removal(name, settings):
    args = {
        "root": "/opt/ds4",
        "gguf_dir": "/var/lib/ds4/gguf",
        "kv_dir": "",
        "build_log_dir": "/var/log/ds4",
        "textfile_dir": "/var/lib/prometheus/node-exporter",
    } | settings
    with pytest.raises(RemoveError, match=name):
        made(
            args["root"],
            args["gguf_dir"],
            args["kv_dir"],
            args["build_log_dir"],
            NAMES,
            textfile_dir=args["textfile_dir"],
        )


@pytest.mark.parametrize("bad", ["relative/dir", "/", "/opt/../etc", ""])
def test_a_path_that_is_not_a_plain_absolute_one_is_refused(bad):
    with pytest.raises(RemoveError, match="ds4_gguf_dir"):
        made("/opt/ds4", bad, "", "/var/log/ds4", NAMES)


# --- the list is complete: every path the roles write, by their tasks, templates and vars ---------------


def _role_values():
    """Every role's defaults and vars, one mapping (names do not collide: each is its role's)."""
    values = {}
    for path in sorted(ROLES.glob("*/defaults/main.yml")) + sorted(ROLES.glob("*/vars/main.yml")):
        values.update(yaml.safe_load(path.read_text()) or {})
    return values


SIMPLE = re.compile(r"\{\{\s*([a-z_0-9]+)\s*(\|\s*dirname\s*)?\}\}")


def _resolve(text, values, depth=0):
    """`text` with its `{{ name }}` and `{{ name | dirname }}` put in; None when anything else is left."""
    if not isinstance(text, str) or depth > 5:
        return None

    def put(match):
        value = values.get(match[1])
        value = _resolve(value, values, depth + 1) if isinstance(value, str) else None
        if value is None:
            return "\0"
        return value.rsplit("/", 1)[0] if match[2] else value

    out = SIMPLE.sub(put, text.strip())
    return None if "\0" in out or "{{" in out else out


def _written(node):
    """Each path a task writes or makes: the dest or path of file, template, copy, ds4_owned_dir and
    ds4_files (the directory it writes into)."""
    if isinstance(node, list):
        for item in node:
            yield from _written(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            writes = key in (
                "ansible.builtin.template",
                "ansible.builtin.copy",
                "ds4.fleet.ds4_owned_dir",
                "ds4.fleet.ds4_files",
            )
            if writes or (key == "ansible.builtin.file" and value.get("state") != "absent"):
                yield value.get("dest") or value.get("path")
            else:
                yield from _written(value)


# What the roles write that is not the Spark's to lose, each with why.
NOT_REMOVED = {
    # The gateway's own files (role ds4_gateway on a gateway, not a Spark).
    "/etc/haproxy/",
    "/run/haproxy/",
    # The distribution's node_exporter settings: written back as they were (NODE_EXPORTER_SAVED).
    "/etc/default/prometheus-node-exporter",
    # The fleet's Prometheus files, on the controller (role ds4_monitoring).
    "ds4-monitoring",
}


def test_every_path_the_roles_write_on_a_spark_is_on_the_list():
    values = _role_values()
    entries = made(
        values["ds4_root"],
        values["ds4_gguf_dir"],
        values["ds4_kv_disk_dir"],
        values["ds4_engine_build_log_dir"],
        NAMES,
        weights=True,
        textfile_dir=values["ds4_node_exporter_textfile_dir"],
    )
    found = set()
    for tasks in ROLES.glob("*/tasks/*.yml"):
        found |= {_resolve(path, values) for path in _written(yaml.safe_load(tasks.read_text()))}
    for name, value in values.items():
        resolved = _resolve(value, values) if name.startswith("_ds4_") else None
        if resolved and resolved.startswith(("/etc/", "/var/", "/opt/", "/usr/", "/run/")):
            found.add(resolved)
    found.discard(None)
    assert len(found) > 30, sorted(found)
    missing = sorted(
        path
        for path in found
        if path.startswith("/")
        and not covered(path, entries)
        and not any(path.startswith(prefix) for prefix in NOT_REMOVED)
        # A directory that holds what goes (the facts' directory, /etc/systemd/system) is emptied or left.
        and not any(within(where, path) for _, where, _ in entries)
    )
    assert missing == [], missing


def engine_units():
    """The names ds4_common's _ds4_engine_unit gives the engine's unit (ds4.service, and ds4-worker.service
    on a pair's worker, written from the same template)."""
    expression = yaml.safe_load((ROLES / "ds4_common" / "vars" / "main.yml").read_text())["_ds4_engine_unit"]
    return set(re.findall(r"'([a-z0-9-]+\.service)'", expression))


def test_every_unit_the_roles_template_is_on_the_list():
    templates = {p.name.removesuffix(".j2") for p in ROLES.glob("*/templates/*.j2")}
    units = {name for name in templates if name.endswith((".service", ".timer"))}
    assert engine_units() == {"ds4.service", "ds4-worker.service"}
    assert units | engine_units() == set(UNITS)


def test_a_pairs_worker_unit_and_its_supervision_go_too():
    paths = {where for _how, where, _keep in plan()}
    assert "/etc/systemd/system/ds4-worker.service" in paths
    assert "/etc/systemd/system/ds4-worker.service.d/00-ds4-fleet-supervision.conf" in paths
    assert "/etc/systemd/system/ds4-worker.service.d" in paths


def test_the_module_defaults_are_the_roles_defaults():
    from ansible_collections.ds4.fleet.plugins.modules import ds4_remove as module

    values = _role_values()
    doc = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert doc["kv_dir"]["default"] == values["ds4_kv_disk_dir"]
    assert doc["build_log_dir"]["default"] == values["ds4_engine_build_log_dir"]
    assert doc["textfile_dir"]["default"] == values["ds4_node_exporter_textfile_dir"]


def test_the_state_directory_is_the_service_users_home():
    values = _role_values()
    assert values["_ds4_state_dir"] == STATE_DIR
    assert (EMPTY, "/etc/ansible/facts.d", ()) in plan()


# --- packages -------------------------------------------------------------------------------------------


def test_the_packages_record_gains_names_and_is_read_back(tmp_path):
    record = str(tmp_path / "records" / "packages.json")
    assert record_names(["nftables"], record)
    assert not record_names(["nftables"], record)
    assert record_names(["logrotate", "nftables"], record)
    assert read_names(Path(record).read_text()) == ["logrotate", "nftables"]
    assert (Path(record).parent.stat().st_mode & 0o777) == 0o700
    assert not record_names([], str(tmp_path / "none" / "packages.json"))
    assert read_names(None) == []
    with pytest.raises(RemoveError, match="not a record of packages"):
        read_names('{"packages": "nftables"}')


def test_the_packages_installed_before_the_roles_installed_any_are_recorded_once(tmp_path):
    record = str(tmp_path / "records" / "packages.json")
    asked = []

    def before(installed=("base-files", "bash")):
        asked.append(True)
        return list(installed)

    # The first run records what was installed before its apt task, whether or not anything is missing.
    assert record_names([], record, before=before)
    assert read_record(Path(record).read_text()) == {"packages": [], "before": ["base-files", "bash"]}
    assert record_names(["nftables"], record, before=lambda: before(("base-files", "bash", "nftables")))
    assert not record_names(["nftables"], record, before=before)
    assert len(asked) == 1, "asked once, before the roles installed any"
    doc = read_record(Path(record).read_text())
    assert doc == {"packages": ["nftables"], "before": ["base-files", "bash"]}
    # Rewritten with fewer packages (remove.yml keeps those that stay): what was installed before stays.
    assert read_record(names_text(["git"], doc=doc)) == {
        "packages": ["git"],
        "before": ["base-files", "bash"],
    }
    # Never in check mode, nor without a record.
    assert not record_missing(["git"], str(tmp_path / "other.json"), True, before=before)
    assert not record_missing(["git"], None, False, before=before)
    assert not (tmp_path / "other.json").exists() and len(asked) == 1


def test_what_apt_brought_in_beside_the_recorded_packages_is_told_by_what_was_there_before():
    doc = {"packages": ["nftables"], "before": ["base-files", "bash", "old-auto"]}
    installed = ["base-files", "bash", "libnftables1", "netbase", "nftables", "old-auto", "vim"]
    automatic = ["libnftables1", "netbase", "old-auto"]
    # Installed automatically since: brought in. Installed before, or by hand (vim), or recorded: not.
    assert brought_in(doc, installed, automatic) == ["libnftables1", "netbase"]
    # A record of an older ds4-fleet does not say: nothing is taken for brought in.
    assert brought_in({"packages": ["nftables"]}, installed, automatic) is None


def test_a_device_group_the_roles_made_goes_only_when_nobody_uses_it(tmp_path):
    record = str(tmp_path / "records" / "groups.json")
    assert record_names(["render"], record, "groups")
    groups = read_names(Path(record).read_text(), "groups", record)
    assert unused_groups(groups, {"render": set()}, set()) == (["render"], {})
    assert unused_groups(groups, {"render": {"alice"}}, set()) == ([], {"render": "its members alice use it"})
    assert unused_groups(groups, {"render": set()}, {"render"})[0] == []
    assert unused_groups(groups, {}, set()) == ([], {})


SIMULATION = """NOTE: This is only a simulation!
Purg nftables [1.0.6-2+deb12u2]
Remv libnftables1:arm64 [1.0.6-2+deb12u2]
Inst something
"""


def test_apt_simulation_is_read_by_its_purge_and_remove_lines():
    assert simulated_removals(SIMULATION) == ["nftables", "libnftables1"]


def test_a_package_whose_purge_takes_another_stays_and_says_why():
    takes = {"nftables": ["nftables"], "git": ["git", "git-lfs"], "logrotate": ["logrotate"]}

    def simulate(names):
        return [taken for name in names for taken in takes[name]]

    chosen, kept = purgeable(["nftables", "git", "logrotate"], simulate)
    assert chosen == ["nftables", "logrotate"]
    assert kept == {"git": "removing it would also remove git-lfs"}


def test_packages_that_take_another_only_together_all_stay():
    def simulate(names):
        return [*names, "shared-dependent"] if len(names) > 1 else list(names)

    chosen, kept = purgeable(["a", "b"], simulate)
    assert chosen == []
    assert set(kept) == {"a", "b"} and "shared-dependent" in kept["a"]


def test_only_the_dependencies_the_purge_leaves_unneeded_go_with_it():
    assert orphans(["nftables"], ["nftables", "libnftables1", "old-orphan"], ["old-orphan"]) == [
        "libnftables1"
    ]


# --- the last Spark serving behind a gateway ---------------------------------------------------------------


def servers(**up):
    return [{"name": name, "up": state} for name, state in up.items()]


def test_the_last_spark_serving_behind_a_gateway_is_refused_unless_forced():
    gateways = {"gw01": servers(spark01=True, spark02=False)}
    problems = refusals("spark01", ["spark01"], gateways)
    assert len(problems) == 1 and "spark01 is the last Spark serving behind the gateway gw01" in problems[0]
    assert "ds4_remove_force=true" in problems[0]
    assert refusals("spark01", ["spark01"], gateways, force=True) == []


def test_a_spark_may_go_while_another_outside_the_run_serves_or_when_it_serves_nowhere():
    assert refusals("spark01", ["spark01"], {"gw01": servers(spark01=True, spark02=True)}) == []
    assert refusals("spark02", ["spark02"], {"gw01": servers(spark01=True, spark02=False)}) == []
    assert refusals("spark01", ["spark01"], {}) == []


def test_sparks_removed_together_do_not_count_for_each_other():
    gateways = {"gw01": servers(spark01=True, spark02=True), "gw02": servers(spark01=True, spark03=True)}
    problems = refusals("spark01", ["spark01", "spark02"], gateways)
    assert len(problems) == 1 and "gw01" in problems[0]


# The pair's netplan file (ds4_pair_link_manage: ds4_pair_link writes it), with a fake netplan: never the
# host's own.


class FakeNetplan:
    """The removal's command runner (Remover.run's shape), recording netplan's calls; `fails` names the
    subcommand that exits 1."""

    def __init__(self, fails=None):
        self.calls, self.fails = [], fails

    def __call__(self, argv, what, ok=(0,)):
        self.calls.append(argv[1:])
        if argv[1] == self.fails:
            raise RemoveError(f"{what} failed (exit 1): bad file")
        return 0, ""


@pytest.fixture
def netplan_dir(tmp_path):
    directory = tmp_path / "etc" / "netplan"
    directory.mkdir(parents=True)
    (directory / "50-cloud-init.yaml").write_text("network: {version: 2}\n")
    return directory


def test_the_removal_takes_off_the_netplan_file_the_pair_link_module_writes():
    from ansible_collections.ds4.fleet.plugins.module_utils._pair.link import NETPLAN_FILE

    assert ds4_remove.NETPLAN_FILE == NETPLAN_FILE
    module = (ROOT / "plugins" / "modules" / "ds4_pair_link.py").read_text()
    assert f'"default": "{NETPLAN_FILE}"' in module and f"default: {NETPLAN_FILE}" in module


def test_the_pairs_netplan_file_goes_and_netplan_generates_and_applies_what_is_left(netplan_dir):
    path = netplan_dir / "60-ds4-pair-link.yaml"
    path.write_text("network: {version: 2}\n")
    netplan = FakeNetplan()
    assert ds4_remove.take_off_netplan("/usr/sbin/netplan", netplan, False, path=str(path)) == [str(path)]
    assert not path.exists() and (netplan_dir / "50-cloud-init.yaml").exists()
    assert netplan.calls == [["generate"], ["apply"]]


def test_without_the_file_netplan_is_not_run(netplan_dir):
    netplan = FakeNetplan()
    assert (
        ds4_remove.take_off_netplan(
            "netplan", netplan, False, path=str(netplan_dir / "60-ds4-pair-link.yaml")
        )
        == []
    )
    assert netplan.calls == []


def test_a_check_run_says_the_file_would_go_and_changes_nothing(netplan_dir):
    path = netplan_dir / "60-ds4-pair-link.yaml"
    path.write_text("network: {version: 2}\n")
    netplan = FakeNetplan()
    assert ds4_remove.take_off_netplan("netplan", netplan, True, path=str(path)) == [str(path)]
    assert path.exists() and netplan.calls == []


def test_a_link_in_the_files_place_goes_itself_and_its_target_stays(netplan_dir, tmp_path):
    target = tmp_path / "elsewhere.yaml"
    target.write_text("keep\n")
    path = netplan_dir / "60-ds4-pair-link.yaml"
    path.symlink_to(target)
    netplan = FakeNetplan()
    assert ds4_remove.take_off_netplan("netplan", netplan, False, path=str(path)) == [str(path)]
    assert not path.is_symlink() and target.read_text() == "keep\n"
    assert netplan.calls == [["generate"], ["apply"]]


def test_a_refused_generate_is_said_and_nothing_is_applied(netplan_dir):
    path = netplan_dir / "60-ds4-pair-link.yaml"
    path.write_text("network: {version: 2}\n")
    netplan = FakeNetplan(fails="generate")
    with pytest.raises(RemoveError, match="netplan generate failed"):
        ds4_remove.take_off_netplan("netplan", netplan, False, path=str(path))
    assert netplan.calls == [["generate"]]


def test_a_spark_without_netplan_loses_the_file_and_runs_nothing(netplan_dir):
    path = netplan_dir / "60-ds4-pair-link.yaml"
    path.write_text("network: {version: 2}\n")
    netplan = FakeNetplan()
    assert ds4_remove.take_off_netplan(None, netplan, False, path=str(path)) == [str(path)]
    assert not path.exists() and netplan.calls == []
