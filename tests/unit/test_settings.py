"""Every public variable of every role, against the values an operator's typo or a hostile file would give.

module_utils/ds4_settings.py (with the roles' argument specs) is what the action ds4_settings_check runs
before anything on a host changes; test_settings_check_action.py runs the action itself in a playbook.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_settings import MASK, check

REPO = Path(__file__).resolve().parents[2]
ROLES = [
    "ds4_common",
    "ds4_preflight",
    "ds4_engine",
    "ds4_weights",
    "ds4_service",
    "ds4_activate",
    "ds4_fleet",
]


def _load(*parts):
    return yaml.safe_load((REPO.joinpath(*parts)).read_text()) or {}


def _options():
    options = {}
    for role in ROLES:
        for name, spec in _load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"][
            "options"
        ].items():
            options.setdefault(name, spec)
    return options


def _defaults():
    values = {}
    for role in ROLES:
        for name, value in _load("roles", role, "defaults", "main.yml").items():
            values.setdefault(name, value)
    # The one templated default: the installer's directory of the user Ansible connects as.
    values["ds4_weights_adopt_dirs"] = ["~root/gguf"]
    return values


OPTIONS = _options()
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
WHOLE = ["many", 1.5, [], True, "1\n"]
SECONDS = ["soon", -1, 0, True, []]

BAD = {
    # ds4_common
    "ds4_root": BAD_DIR,
    "ds4_release": ["", "0.6.5", "v0.6", "v0.6.5\n", "v0.6.5;id", "v01.6.5", "latest", 65],
    "ds4_release_commit": ["abc", "a" * 40 + "\n", "g" * 40, "a" * 41],
    "ds4_cuda_arch": ["sm121", "sm_121\n", "compute_121", "sm_1210"],
    "ds4_gguf_dir": BAD_DIR,
    "ds4_model_generation": ["", "v4", "0731\n", 731],
    "ds4_speculation": ["eagle", "", "DSPARK"],
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
    ],
    "ds4_host": ["", "a b", "-0.0.0.0", "host\n"],
    "ds4_port": [0, 70000, -1, "http", "8000\n", True],
    "ds4_proxy_env": ["http://proxy", {"HTTP": "x"}, {"https_proxy": "http://a b"}, {"https_proxy": "x\n"}],
    # ds4_engine
    "ds4_engine_repo": ["", " ", "https://github.com/Entrpi/ds4.git\n", " https://x/ds4.git"],
    "ds4_releases_keep": [1, 0, *WHOLE],
    "ds4_engine_build_jobs": [-1, *WHOLE],
    "ds4_engine_build_log_dir": BAD_DIR,
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
    # ds4_service
    "ds4_ctx": [0, -1, *WHOLE],
    "ds4_kv_disk_dir": [d for d in BAD_DIR if d != ""],
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
    "ds4_device_allow": ["char-nvidia* rwm", ["char-nvidia* rwx"], ["char-nvidia*"], ["char-nvidia* rwm\n"]],
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
    "ds4_service_launch": ["maybe", []],
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
}

CASES = [
    pytest.param(name, value, id=f"{name}-{i}")
    for name, values in BAD.items()
    for i, value in enumerate(values)
]


def test_every_public_variable_has_values_it_must_refuse():
    assert sorted(set(OPTIONS) - set(BAD)) == []
    assert sorted(set(BAD) - set(OPTIONS)) == []


def test_the_defaults_are_accepted():
    assert check(OPTIONS, DEFAULTS) == []


def test_the_sandbox_and_example_inventories_are_accepted():
    for inventory in ("sandbox", "example"):
        values = dict(DEFAULTS, **_load("inventory", inventory, "group_vars", "all.yml"))
        assert check(OPTIONS, values) == [], inventory


@pytest.mark.parametrize(("name", "value"), CASES)
def test_a_bad_value_is_refused_naming_its_variable(name, value):
    refused = check(OPTIONS, dict(DEFAULTS, **{name: value}))
    assert refused, f"{name}={value!r} was accepted"
    assert any(re.match(rf"{name}(?![a-z_])", message) for message in refused), refused


def test_all_bad_values_are_reported_in_one_pass():
    values = dict(
        DEFAULTS, ds4_port=70000, ds4_kv_disk_dir="/", ds4_smoke_expect="[Pp]aris(", ds4_release="v1"
    )
    refused = check(OPTIONS, values)
    assert [m.split(" ")[0] for m in refused] == [
        "ds4_release",
        "ds4_kv_disk_dir",
        "ds4_smoke_expect",
        "ds4_port",
    ]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "ds4_kv_disk_dir",
            "/",
            'ds4_kv_disk_dir must be a directory of its own, not a system directory such as /; got "/"',
        ),
        (
            "ds4_kv_disk_dir",
            "/tmp/kv",
            "ds4_kv_disk_dir must be a directory of its own outside /tmp, which belongs to the system or to "
            'everyone; got "/tmp/kv"',
        ),
        (
            "ds4_release",
            "v0.6.5\n",
            "ds4_release must be an engine release tag: v and three or more numbers, like v0.6.5; "
            'got "v0.6.5\\n"',
        ),
        ("ds4_port", 70000, "ds4_port must be a port number from 1 to 65535: 70000"),
        ("ds4_port", "http", 'ds4_port must be a whole number; got "http"'),
        ("ds4_speculation", "eagle", 'ds4_speculation must be one of dspark, mtp, plain; got "eagle"'),
        (
            "ds4_smoke_expect",
            "[Pp]aris(",
            "ds4_smoke_expect must be a regular expression that compiles (Python re: missing ), unterminated "
            'subpattern at position 8); got "[Pp]aris("',
        ),
    ],
)
def test_a_refusal_says_what_would_be_accepted(name, value, message):
    assert check(OPTIONS, dict(DEFAULTS, **{name: value})) == [message]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"ds4_kv_disk_dir": "/var/lib/ds4/gguf/kv"},
            "ds4_gguf_dir must be a directory apart from ds4_kv_disk_dir (/var/lib/ds4/gguf/kv), neither it "
            'nor a parent of it; got "/var/lib/ds4/gguf"',
        ),
        (
            {"ds4_root": "/var/lib/ds4"},
            "ds4_root must be a directory apart from ds4_gguf_dir (/var/lib/ds4/gguf), neither it nor a "
            'parent of it; got "/var/lib/ds4"',
        ),
        (
            {"ds4_engine_build_log_dir": "/opt/ds4"},
            "ds4_root must be a directory apart from ds4_engine_build_log_dir (/opt/ds4), neither it nor a "
            'parent of it; got "/opt/ds4"',
        ),
    ],
)
def test_managed_directories_never_hold_one_another(changes, message):
    assert message in check(OPTIONS, dict(DEFAULTS, **changes))


def test_a_token_goes_over_plain_http_only_when_the_operator_says_so():
    values = dict(DEFAULTS, ds4_hf_endpoint="http://mirror.example:8080", ds4_hf_token="hf_secret")
    refused = check(OPTIONS, values)
    assert len(refused) == 1 and refused[0].startswith(
        'ds4_hf_endpoint "http://mirror.example:8080" is plain http'
    )
    assert "ds4_hf_token_over_http" in refused[0] and "hf_secret" not in refused[0]
    assert check(OPTIONS, dict(values, ds4_hf_token_over_http=True)) == []
    assert check(OPTIONS, dict(values, ds4_hf_endpoint="https://mirror.example")) == []
    assert check(OPTIONS, dict(values, ds4_hf_token="")) == []


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("ds4_hf_token", "hf secret", "hf secret"),
        ("ds4_hf_token", ["hf_listed_secret"], "hf_listed_secret"),
        ("ds4_extra_env", {"OPENAI_API_KEY": "sk-live\n"}, "sk-live"),
        ("ds4_extra_env", {"OPENAI_API_KEY": ["sk-listed"]}, "sk-listed"),
        ("ds4_extra_env", {"bad name": "sk-named"}, "sk-named"),
    ],
)
def test_a_secret_is_never_shown_in_a_refusal(name, value, secret):
    refused = check(OPTIONS, dict(DEFAULTS, **{name: value}))
    assert refused and all(secret not in message for message in refused), refused
    assert any(message.startswith(name) for message in refused)


def test_a_masked_secret_is_shown_as_masked():
    refused = check(OPTIONS, dict(DEFAULTS, ds4_hf_token=42))
    assert refused == [f"ds4_hf_token must be a string; got {MASK}"]


def test_a_generation_added_to_the_catalog_is_accepted():
    catalog = copy.deepcopy(CATALOG)
    catalog["0932"] = copy.deepcopy(catalog["0731"])
    for entry in catalog["0932"]["files"].values():
        entry["name"] = entry["name"].replace("-0731", "-0932")
    # A 0932 file would be taken for a generation other than 0731 by its name: the catalog decides.
    refused = check(OPTIONS, dict(DEFAULTS, ds4_model_catalog=catalog, ds4_model_generation="0932"))
    assert refused == []
