"""Values every public variable of the ds4 roles must refuse: an operator's typos and a hostile file's.

Shared by the unit tests (tests/unit/plugins/module_utils/_run/test_settings.py, and
tests/unit/plugins/action/test_ds4_settings_check.py, which gives every round below to the action in a
playbook) and the site scenario, which gives the first round to site.yml on a serving sandbox Spark and
asserts that nothing on it changed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# Every role of the collection: a role added later must say what its variables refuse, too.
ROLES = sorted(
    path.name for path in (REPO / "roles").iterdir() if (path / "meta" / "argument_specs.yml").exists()
)


def load(*parts):
    return yaml.safe_load((REPO.joinpath(*parts)).read_text()) or {}


def options_of(roles):
    """The options of the roles' main entry points, ds4_common's first."""
    options = {}
    for role in ["ds4_common", *roles]:
        for name, spec in load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"][
            "options"
        ].items():
            options.setdefault(name, spec)
    return options


def _defaults():
    values = {}
    for role in ROLES:
        for name, value in load("roles", role, "defaults", "main.yml").items():
            values.setdefault(name, value)
    # The one templated default: the installer's directory of the user Ansible connects as.
    values["ds4_weights_adopt_dirs"] = ["~root/gguf"]
    values["ds4_monitoring_dir"] = "/root/ds4-monitoring"
    # Defaults that read the inventory: none of these sandbox runs has a gateway.
    values["ds4_host"] = "127.0.0.1"
    # ds4_model_family's first generation (ds4.fleet.family_generation).
    values["ds4_model_generation"] = "0731"
    # Its own speculation (ds4.fleet.family_speculation): 0731's drafter.
    values["ds4_speculation"] = "dspark"
    # Its family's context (ds4.fleet.family_context): V4 Flash sets none, the engine's default.
    values["ds4_ctx"] = 524288
    values["ds4_firewall"] = False
    values["ds4_gateway_tls_names"] = ["gateway01"]
    return values


OPTIONS = options_of(ROLES)
DEFAULTS = _defaults()
CATALOG = DEFAULTS["ds4_model_catalog"]


def _catalog_with(**base):
    catalog = copy.deepcopy(CATALOG)
    catalog["0731"]["files"]["base"].update(base)
    return catalog


# What each variable must refuse. Shared shapes first; each variable adds its own.
CONTROL = ["x\n", "x\x00y", "x\x1b[31m"]
SPECIAL = ["a b", 'a"b', "a$b", "a%b", "a`b", "a\\b"]
BAD_DIR = [
    "",
    "relative/dir",
    "/",
    "/usr",
    "/var/lib",
    "/etc/ds4",
    "/tmp/ds4",
    "/var/tmp/ds4",
    "/proc/ds4",
    "/opt/ds4/../../etc",
    "/opt/./ds4",
    "/opt//ds4",
    "/opt/ds4/",
    "/opt/ds4\n",
    "/opt/ds 4",
    "/opt/ds4;rm",
    "/opt/ds4%i",
    "/opt/ds4$HOME",
    "/opt/ds\x1b4",
    ["/opt/ds4"],
]
# Directories handed to a user other than root (issue 26): each of these, accepted by the deny-list that
# came before the allow-list, would have been chowned to that user.
HANDED_DIR = [
    "/usr/local/lib/ds4",
    "/var/lib/dpkg",
    "/root/.ssh",
    "/var/lib/ds4-fleet",
    "/var/lib/prometheus/node-exporter",
    "/var/lib/ds4",
    "/var/lib/ds4/rollback",
    "/opt/models",
    "/home/bob/models",
    "/home/root/models",
    "/mnt",
]
WHOLE = ["many", 1.5, [], True, "1\n"]
SECONDS = ["soon", -1, 0, True, []]

BAD = {
    # ds4_common
    "ds4_root": BAD_DIR,
    "ds4_release": [
        "",
        "0.6.5",
        "v0.6",
        "v0.6.5\n",
        "v0.6.5;id",
        "v01.6.5",
        "latest",
        65,
        "g67bd55c",
        "G67bd55c0a1b2",
        "a/b-g67bd55c0a1b2",
        "-g67bd55c0a1b2",
    ],
    "ds4_release_commit": ["abc", "a" * 40 + "\n", "g" * 40, "a" * 41],
    "ds4_cuda_arch": ["sm121", "sm_121\n", "compute_121", "sm_1210"],
    "ds4_gguf_dir": [*BAD_DIR, *HANDED_DIR],
    "ds4_model_family": ["", "glm-5", "GLM-5.3-Flash", "deepseek-v4-flash\n"],
    "ds4_model_generation": ["", "v4", "0731\n", 731],
    "ds4_speculation": ["eagle", "", "DSPARK"],
    "ds4_quantization": ["q8", "", "q4\n", "mxfp4"],
    "ds4_extra_quantizations": [
        {
            "0731": {
                "q3": {"name": "x-0731.gguf", "repo": "a/b", "revision": "main", "size": 5, "sha256": None}
            }
        },
        {"v5": {}},
        {
            "0731": {
                "q4": {
                    "name": "y-0731.gguf",
                    "repo": "a/b",
                    "revision": "main",
                    "size": 5,
                    "sha256": "a" * 64,
                }
            }
        },
        "q3",
    ],
    "ds4_spark_memory_bytes": [-1, "lots", "1\n"],
    "ds4_pairs": [
        {"p1": {"coordinator": {"host": "spark04", "address": "10.77.0.1"}}},
        {
            "p1": {
                "coordinator": {"host": "spark04", "address": "10.77.0.1"},
                "worker": {"host": "spark04", "address": "10.77.0.2"},
            }
        },
        {
            "p1": {
                "coordinator": {"host": "spark04", "address": "10.77.0.1"},
                "worker": {"host": "spark05", "address": "10.77.0.2"},
            },
            "p2": {
                "coordinator": {"host": "spark05", "address": "10.78.0.1"},
                "worker": {"host": "spark06", "address": "10.78.0.2"},
            },
        },
        {
            "p1": {
                "coordinator": {"host": "spark04", "address": "127.0.0.1"},
                "worker": {"host": "spark05", "address": "link"},
            }
        },
        "pair",
    ],
    "ds4_pair_port": [0, 70000, "http", True],
    "ds4_hf_endpoint": [
        "",
        "huggingface.co",
        "ftp://huggingface.co",
        "https://",
        "https://user:secret@huggingface.co",
        "https://huggingface.co/a b",
        "https://huggingface.co\n",
        "https://huggingface.co/$x",
    ],
    "ds4_hf_token": ["a token", "hf_abc\n", "hf\x00abc"],
    "ds4_hf_token_over_http": ["maybe", [], "2"],
    "ds4_run_lock_wait": [-1, 86401, *WHOLE],
    "ds4_run_lock_lease": [9, 86401, *WHOLE],
    "ds4_old_weights": ["sometimes", ""],
    "ds4_model_catalog": [
        {},
        "catalog",
        {"0731": {"files": {}}},
        _catalog_with(name="bad\nname-0731.gguf"),
        _catalog_with(name="../../etc/shadow-0731.gguf"),
        _catalog_with(name="model-0731.gguf\n"),
        _catalog_with(sha256="a" * 64 + "\n"),
        _catalog_with(repo="owner/name\n"),
        _catalog_with(revision="main\n"),
        {
            "0731": dict(
                CATALOG["0731"], reference={"v0.5.0": {"source": "README", "stamp": "x", "figures": {}}}
            )
        },
    ],
    "ds4_host": ["", "a b", "-0.0.0.0", "host\n", "localhost", "spark01.example"],
    "ds4_port": [0, 70000, -1, "http", "8000\n", True],
    "ds4_proxy_env": ["http://proxy", {"HTTP": "x"}, {"https_proxy": "http://a b"}, {"https_proxy": "x\n"}],
    # ds4_engine
    "ds4_engine_lineage": ["dwarfstar", "Fork", " fork", 1],
    "ds4_engine_branch": ["-main", "a..b", "main\n", "x y", 5],
    "ds4_engine_repo": ["", " ", "https://github.com/Entrpi/ds4.git\n", " https://x/ds4.git"],
    "ds4_releases_keep": [1, 0, *WHOLE],
    "ds4_engine_build_jobs": [-1, *WHOLE],
    "ds4_engine_build_log_dir": BAD_DIR,
    "ds4_release_accept_moved_tag": ["maybe", [], "yes please"],
    "ds4_engine_make_targets": [
        "cuda-spark",
        {"sm_121": "spark"},
        {"sm121": "cuda"},
        {"sm_121": "cuda-spark\n"},
        {"sm_121": ["cuda"]},
        {"": "cuda"},
    ],
    # ds4_preflight
    "ds4_accepted_archs": [[], "aarch64", ["aarch64\n"], ["aarch 64"]],
    "ds4_accepted_compute_caps": [[], ["12"], ["12.1\n"], "12.1"],
    "ds4_cuda_major": [0, 100, *WHOLE],
    "ds4_force": ["maybe", []],
    "ds4_cuda_home": ["cuda", "/usr/local/cuda\n", "/usr/local/../cuda", "/usr/local/cuda x"],
    "ds4_build_space_bytes": [-1, *WHOLE],
    "ds4_weights_space_bytes": [-1, "lots", "1\n"],
    "ds4_weights_unknown_size_bytes": [{"base": -1}, {"drafter": 1}, "94489280512", {"base": True}],
    # ds4_weights
    "ds4_weights_adopt_dirs": ["/home/ubuntu/gguf", ["gguf"], ["/home/u/../../etc"], ["~ro ot/gguf"]],
    "ds4_weights_owner": ["", "Root", "root\n", "root;id", "ro ot"],
    "ds4_weights_group": ["", "root\n", "a b"],
    "ds4_weights_dir_mode": ["755", 755, "0755\n", "0855", "07555"],
    "ds4_weights_file_mode": ["644", 644, "0644\n", "u+rw"],
    "ds4_weights_retries": [-1, *WHOLE],
    "ds4_weights_retry_delay": SECONDS,
    "ds4_weights_timeout": SECONDS,
    "ds4_weights_fetch_timeout": [0, *WHOLE],
    "ds4_weights_progress_interval": [0, 31, *WHOLE],
    "ds4_weights_in_use": ["/m/a.gguf", ["a.gguf"], ["/m/a.gguf\n"], ["/m/../a.gguf"]],
    "ds4_weights_connections": [0, 65, *WHOLE],
    "ds4_weights_peers": ["maybe", []],
    "ds4_weights_peer_relay": ["maybe", []],
    "ds4_weights_peer_port": [0, 65536, *WHOLE],
    "ds4_weights_peer_rate": [-1, *WHOLE],
    "ds4_weights_peer_interface": ["eth 0", "enp1s0f0np0\n", "a-very-long-interface-name", ["eth0"]],
    # ds4_service
    "ds4_ctx": [0, -1, *WHOLE],
    "ds4_kv_disk_dir": [*(d for d in BAD_DIR if d != ""), *HANDED_DIR],
    "ds4_kv_disk_space_mb": [0, *WHOLE],
    "ds4_mem_floor_gb": [-1, "four", 1.5, True],
    "ds4_extra_args": ["--cors", ["--port", "9000"], ["-m", "/x.gguf"], ["--ok\n"], [True]],
    "ds4_extra_env": [
        "A=1",
        {"lower": "1"},
        {"DS4_LOCK_FILE": "/tmp/x"},
        {"KEY": "v\nDS4_LOCK_FILE=/tmp/x"},
        {"KEY": True},
        {"KEY": None},
    ],
    "ds4_start_timeout": [0, *WHOLE],
    "ds4_stop_timeout": [0, *WHOLE],
    "ds4_restart_sec": [0, *WHOLE],
    "ds4_start_limit_burst": [0, *WHOLE],
    "ds4_start_limit_interval": [0, 150, *WHOLE],
    "ds4_limit_memlock": ["", "8X", "8M\n", "unlimited", "-1"],
    "ds4_rdma_limit_memlock": ["", "8X", "unlimited"],
    "ds4_rdma_sysfs_root": ["", "sys", "/sys\n"],
    "ds4_device_allow": [
        "char-nvidia* rwm",
        ["char-nvidia* rwx"],
        ["char-nvidia*"],
        ["char-nvidia* rwm\n"],
        # A systemd specifier: %i, %n would name something else than written.
        ["char-nvidia%i rwm"],
        ["/dev/nvidia%n rw"],
    ],
    "ds4_log_file": ["maybe", [], "2"],
    "ds4_log_rotate": [0, *WHOLE],
    "ds4_log_maxsize": ["", "100MB", "100M\n", "-1"],
    "ds4_update_check": ["maybe", []],
    "ds4_update_url": [
        "",
        "ftp://x/LATEST",
        "http://",
        "http://user:pw@x/LATEST",
        *("http://x/" + c for c in SPECIAL),
    ],
    "ds4_update_check_on_calendar": ["", "daily\n", "daily;id", "$daily"],
    "ds4_update_check_randomized_delay": ["", "1h\n", "soon", "-1h"],
    "ds4_take_over_installer": ["maybe", []],
    "ds4_skip_when_unchanged": ["yes please", [], 2],
    "ds4_service_launch": ["maybe", []],
    "ds4_watchdog": ["maybe", []],
    "ds4_pair_link_manage": ["maybe", []],
    "ds4_pair_link_interface": ["eth 0", "a" * 16, "eth0\n", 3],
    "ds4_pair_link_prefix": [7, 31, *WHOLE],
    "ds4_pair_link_mtu": [100, 9217, -1, *WHOLE],
    "ds4_watchdog_interval": [0, *WHOLE],
    "ds4_watchdog_failures": [0, *WHOLE],
    "ds4_watchdog_timeout": [0, 10, 11, *WHOLE],
    "ds4_metrics": ["maybe", []],
    "ds4_node_exporter_port": [0, 65536, *WHOLE],
    "ds4_node_exporter_manage": ["maybe", []],
    "ds4_node_exporter_listen_address": ["localhost", "*", "0.0.0.0 ", "10.0.0.5:9100", "::1\n", []],
    "ds4_node_exporter_textfile_dir": ["", "var/lib/x", "/var/lib", "/etc/prom", "/var/lib/x/../y", []],
    "ds4_metrics_next_generation_bytes": [-1, *WHOLE],
    # ds4_gateway
    "ds4_gateway_address": ["", "any", "0.0.0.0 ", "::1\n"],
    "ds4_gateway_metrics_address": ["any", "0.0.0.0 ", "::1\n", "gw01", []],
    "ds4_gateway_port": [0, 65536, *WHOLE],
    "ds4_gateway_metrics_port": [0, 65536, *WHOLE],
    "ds4_gateway_api_keys": ["key", ["k\n"]],
    "ds4_gateway_api_keys_file": ["keys\n", " keys", ["keys"]],
    "ds4_gateway_tls_cert": ["cert.pem\n", ["cert.pem"]],
    "ds4_gateway_tls_key": ["key.pem\n", ["key.pem"]],
    "ds4_gateway_tls_names": [[], "gw", ["gw one"], ["gw\n"]],
    "ds4_gateway_tls_days": [0, 36501, *WHOLE],
    # HAProxy reads whole milliseconds ("inter 0.5s" is refused): finer or longer than a day is refused.
    "ds4_gateway_check_interval": [*SECONDS, 0.0005, 1.0001, 86401],
    "ds4_gateway_check_fall": [0, *WHOLE],
    "ds4_gateway_check_rise": [0, *WHOLE],
    "ds4_gateway_timeout": [0, *WHOLE],
    "ds4_gateway_connect_timeout": [0, *WHOLE],
    "ds4_gateway_maxconn": [0, *WHOLE],
    "ds4_gateway_max_body_mb": [0, 65, *WHOLE],
    "ds4_gateway_config_template": ["t.j2\n", ["t.j2"], "", " t.j2"],
    "ds4_monitoring_alerts_template": ["t.j2\n", 1, ""],
    "ds4_launch_env_template": ["t.j2\n", ["t.j2"], ""],
    "ds4_logrotate_template": ["t.j2\n", ""],
    "ds4_site_templates_dir": ["templates", "/a\nb"],
    "ds4_firewall": ["maybe", []],
    "ds4_firewall_allow": ["10.0.0.0/24", ["10.0.0.0 /24"], ["any"], ["10.0.0.0/24\n"]],
    "ds4_upgrade_gateway": ["maybe", []],
    "ds4_remove_weights": ["maybe", []],
    "ds4_remove_packages": ["maybe", 2],
    "ds4_remove_force": ["yes please", {}],
    "ds4_remove_pair_member_alone": ["yes please", {}],
    "ds4_upgrade_gateway_up_timeout": [-1, "long"],
    # ds4_monitoring
    "ds4_monitoring_dir": ["relative/dir", "/tmp/mon\n", ["/tmp"]],
    "ds4_monitoring_group": ["", "spark s", "sparks\n", "1sparks"],
    "ds4_monitoring_scrape_interval": ["", "30", "30 s", "30s\n", "soon"],
    "ds4_monitoring_evaluation_interval": ["", "30", "30s\n"],
    "ds4_monitoring_engine_down_for": ["", "5", "5m\n", "five minutes"],
    "ds4_monitoring_gateway_down_for": ["", "5", "5m\n"],
    "ds4_monitoring_update_days": [-1, *WHOLE],
    "ds4_monitoring_counter_window": ["", "1", "1h\n", "an hour"],
    "ds4_monitoring_metrics_stale_seconds": [0, *WHOLE],
    "ds4_monitoring_alert_for": [
        "5m",
        {"Ds4GpuThrottled": "ten minutes"},
        {"Ds4GpuThrottled": 600},
        {"ds4gputhrottled": "10m"},
        {"Ds4 Gpu": "10m"},
    ],
    "ds4_monitoring_restart_loop": [0, *WHOLE],
    "ds4_monitoring_gateway_group": ["", "gate ways", "gateways\n"],
    "ds4_monitoring_gateway_port": [0, 65536, *WHOLE],
    "ds4_monitoring_gateway_backend": ["", "ds 4", "ds4\n", "ds4;x"],
    # ds4_activate
    "ds4_smoke_prompt": ["", "   ", "a\x00b", 42, ["What?"]],
    "ds4_smoke_expect": ["", "[Pp]aris(", "(?P<x", "*", 42],
    "ds4_smoke_max_tokens": [0, *WHOLE],
    "ds4_smoke_timeout": [0, *WHOLE],
    "ds4_perf_gate": ["always", ""],
    "ds4_perf_max_regression": [0, 100, -5, "ten", True],
    "ds4_perf_prompt_tokens": [15, 131073, *WHOLE],
    "ds4_perf_decode_tokens": [1, 16385, *WHOLE],
    "ds4_perf_runs": [0, 21, *WHOLE],
    "ds4_perf_timeout": [0, *WHOLE],
    "ds4_perf_history": [0, 1001, *WHOLE],
    # ds4_fleet
    "ds4_upgrade_serial": [0, "0%", "101%", "half", [], [1, "x"], True],
    "ds4_upgrade_max_fail_percentage": [-1, 101, "none"],
    "ds4_upgrade_drain_timeout": [-1, "long"],
    "ds4_upgrade_drain_interval": [0, -1, "often"],
    "ds4_upgrade_lb_out_tasks": ["tasks.yml\n", " tasks.yml", ["tasks.yml"]],
    "ds4_upgrade_lb_in_tasks": ["tasks.yml\n", " tasks.yml", ["tasks.yml"]],
    "ds4_upgrade_summary_json": ["summary.json", "/tmp/../s.json", "/tmp/s.json\n"],
    "ds4_status_json": ["status.json", "/tmp/s json", "/tmp/s.json\n"],
    "ds4_verify_min_ratio": [0, 1.5, -0.1, "most", True],
    "ds4_verify_reference_scale": [0, -1, "fast", True],
    "ds4_verify_runs": [0, 21, *WHOLE],
    "ds4_verify_decode_tokens": [0, 16385, *WHOLE],
    "ds4_verify_concurrent": [0, 257, *WHOLE],
    "ds4_verify_json": ["verify.json", "/tmp/v json", "/tmp/v.json\n"],
}


# The variables of the roles site.yml checks, by rounds: round k gives each its k-th bad value at once.
SITE_ROLES = ["ds4_preflight", "ds4_engine", "ds4_weights", "ds4_service", "ds4_activate"]
# Variables judged together (a catalog against its generation; the start limit against the restarts) take
# their bad values in rounds of their own: one bad value must not hide another's refusal.
TOGETHER = [
    (
        "ds4_model_family",
        "ds4_model_generation",
        "ds4_speculation",
        "ds4_model_catalog",
        "ds4_quantization",
        "ds4_extra_quantizations",
    ),
    ("ds4_restart_sec", "ds4_start_limit_burst", "ds4_start_limit_interval"),
    ("ds4_watchdog_interval", "ds4_watchdog_timeout"),
]


def site_rounds():
    """[{variable: its bad value}] for each round, every bad value of the site roles' variables in one."""
    bad = {name: BAD[name] for name in options_of(SITE_ROLES)}
    first = {}
    for group in TOGETHER:
        start = 0
        for member in group:
            first[member] = start
            start += len(bad[member])
    count = max(first.get(name, 0) + len(values) for name, values in bad.items())
    rounds = []
    for round_ in range(count):
        values = {}
        for name, candidates in bad.items():
            index = round_ - first.get(name, 0)
            if 0 <= index < len(candidates):
                values[name] = candidates[index]
        rounds.append(values)
    return rounds
