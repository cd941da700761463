"""Every public variable of every role, against the values an operator's typo or a hostile file would give.

module_utils/_run/settings.py (with the roles' argument specs) is what the action ds4_settings_check runs
before anything on a host changes; tests/unit/plugins/action/test_ds4_settings_check.py runs the action
itself in a playbook, and the site scenario every role's bad values through site.yml.
"""

from __future__ import annotations

import copy
import json
import re

import jinja2
import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import SECRET_BEARING
from ansible_collections.ds4.fleet.plugins.module_utils._run.settings import (
    MASK,
    check,
    gateway_keys,
    gateway_problems,
)
from settings_cases import BAD, CATALOG, DEFAULTS, OPTIONS, REPO, load

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
        values = dict(DEFAULTS, **load("inventory", inventory, "group_vars", "all.yml"))
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
            "ds4_release must be an engine release tag: v and three or more numbers, like v0.6.5; or, for "
            "a release pinned by ds4_release_commit alone, g and its first 12 hex digits, behind a name of "
            'yours if you like (dwarfstar-g67bd55c0a1b2); got "v0.6.5\\n"',
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
    quants = catalog["0932"]["quantizations"].values()
    for entry in [*catalog["0932"]["files"].values(), *(q for q in quants if q["name"])]:
        entry["name"] = entry["name"].replace("-0731", "-0932")
    # A 0932 file would be taken for a generation other than 0731 by its name: the catalog decides.
    refused = check(OPTIONS, dict(DEFAULTS, ds4_model_catalog=catalog, ds4_model_generation="0932"))
    assert refused == []


def test_a_family_is_served_with_the_generation_its_default_gives():
    settings = dict(DEFAULTS, ds4_model_family="glm-5.3-flash", ds4_model_generation="glm-5.3", ds4_ctx=16384)
    assert check(OPTIONS, dict(settings, ds4_speculation="mtp")) == []
    assert check(OPTIONS, dict(settings, ds4_speculation="plain")) == []
    # GLM speculates with its own MTP block: the drafter set explicitly is refused with the modes it has.
    assert check(OPTIONS, dict(settings, ds4_speculation="dspark")) == [
        "ds4_speculation 'dspark' needs a dspark file, and ds4_model_generation 'glm-5.3' has none in "
        "ds4_model_catalog; choose one of: mtp, plain, or leave ds4_speculation unset for the family's own "
        "(mtp)"
    ]


def test_a_context_beyond_what_the_family_allows_is_refused():
    glm = dict(
        DEFAULTS, ds4_model_family="glm-5.3-flash", ds4_model_generation="glm-5.3", ds4_speculation="mtp"
    )
    assert check(OPTIONS, dict(glm, ds4_ctx=16384)) == []
    assert check(OPTIONS, dict(glm, ds4_ctx=32768)) == [
        "ds4_ctx 32768 exceeds the 16384 tokens ds4_model_family 'glm-5.3-flash' allows: leave ds4_ctx unset "
        "for the family's own (16384), or set one up to 16384"
    ]


def test_a_generation_of_another_family_is_refused_naming_the_family_to_set():
    refused = check(OPTIONS, dict(DEFAULTS, ds4_model_generation="v4.1", ds4_speculation="plain"))
    assert refused == [
        "ds4_model_generation 'v4.1' is of ds4_model_family 'deepseek-v4.1-flash', not 'deepseek-v4-flash': "
        "set ds4_model_family: deepseek-v4.1-flash to serve it, or leave ds4_model_generation unset to serve "
        "deepseek-v4-flash's '0731'"
    ]


def test_the_gateway_keys_are_the_lists_then_the_files_each_once():
    text = "# the operators' keys\nkey-from-file-0000000001  # alice\n\n  key-from-the-list-000001\n"
    keys = gateway_keys(["key-from-the-list-000001"], text)
    assert keys == ["key-from-the-list-000001", "key-from-file-0000000001"]
    assert gateway_keys([], "") == []


GATEWAY = {"ds4_gateway_api_keys": ["k" * 16], "ds4_gateway_tls_cert": "", "ds4_gateway_tls_key": ""}


def gateway(changes=None, text="", files=(), sparks=("spark01",), addresses=None):
    return gateway_problems(
        dict(GATEWAY, **(changes or {})), text, lambda path: path in files, list(sparks), addresses
    )


def test_usable_gateway_settings_are_accepted():
    assert gateway() == []
    assert (
        gateway(
            {"ds4_gateway_tls_cert": "/c.pem", "ds4_gateway_tls_key": "/k.pem"}, files=("/c.pem", "/k.pem")
        )
        == []
    )


def test_a_bad_gateway_key_is_named_by_its_position_among_all_and_never_shown():
    secret = "short-secret"
    refused = gateway(
        {"ds4_gateway_api_keys": ["k" * 16, "has space in it 0000"]}, text=f"{'f' * 16}\n{secret}\n"
    )
    assert refused == [
        "ds4_gateway_api_keys (with ds4_gateway_api_keys_file) has keys that are not 16 or more of "
        "A-Z a-z 0-9 . _ ~ + / = -: number(s) 2, 4 of 4"
    ]
    assert secret not in refused[0]


def test_a_gateway_without_a_key_a_certificate_pair_or_a_spark_is_refused():
    refused = gateway({"ds4_gateway_api_keys": [], "ds4_gateway_tls_cert": "/gone.pem"}, sparks=())
    assert refused == [
        "ds4_gateway_api_keys and ds4_gateway_api_keys_file give no key: a gateway without keys would "
        "serve anyone",
        "ds4_gateway_tls_cert and ds4_gateway_tls_key go together: give both (the operator's certificate) "
        "or neither (a self-signed one)",
        'ds4_gateway_tls_cert names no file on this controller: "/gone.pem"',
        "ds4_target_hosts (sparks) names no host: the gateway would have no Spark to send requests to",
    ]


# A marker secret in every shape a secret-bearing setting may be given in, each one refused or not.
MARKER = "Mk-7f3e9-SECRET"
MARKER_INT = 73556081
MARKED = [
    MARKER,
    f"{MARKER}\n",
    f"A={MARKER}",
    [MARKER],
    [f"A={MARKER}"],
    {"KEY": MARKER},
    {"KEY": f"{MARKER}\n"},
    {"KEY": [MARKER]},
    {"KEY": {"inner": MARKER}},
    {MARKER: "v"},
    {"DS4_LOCK_FILE": MARKER},
    {"https_proxy": f"http://u:{MARKER}@proxy:3128 "},
    {"HTTP": f"http://u:{MARKER}@proxy:3128"},
    MARKER_INT,
    [MARKER_INT],
    {"KEY": MARKER_INT, "bad": True},
    f"https://user:{MARKER}@huggingface.co/a b",
    f"https://{MARKER}@huggingface.co\n",
    f"ftp://user:{MARKER}@host/LATEST",
    f" https://u:{MARKER}@forge/ds4.git",
    f"http://u:{MARKER}@mirror:8080",
    f"http://u:{MARKER}@x/$LATEST",
]


@pytest.mark.parametrize("name", sorted(SECRET_BEARING))
def test_no_refusal_ever_shows_a_secret_bearing_value(name):
    """Every bad value of every secret-bearing setting, and the marker in every shape, alone and with a
    token over plain http (a second rule that shows the endpoint): the marker is never in a message."""
    for value in [*BAD[name], *MARKED]:
        for extra in ({}, {"ds4_hf_token": "hf_token", "ds4_hf_token_over_http": False}):
            refused = check(OPTIONS, {**DEFAULTS, **extra, name: value})
            text = "\n".join(refused)
            assert MARKER not in text and str(MARKER_INT) not in text, (value, refused)
            # The URLs in BAD carry the word "secret" as their password.
            assert ":secret@" not in text and ":pw@" not in text, (value, refused)


def test_a_url_refused_for_another_reason_is_shown_with_its_userinfo_masked():
    refused = check(OPTIONS, dict(DEFAULTS, ds4_hf_endpoint=f"https://u:{MARKER}@hub.example/a b"))
    assert refused == [
        "ds4_hf_endpoint must be an http or https URL without spaces, quotes, backslashes, %, $ or control "
        'characters; got "https://***@hub.example/a b"'
    ]


def test_a_directory_handed_to_a_user_must_lie_below_an_allowed_root():
    """Issue 26: an allow-list, not a deny-list; each refusal names the variable and what is accepted."""
    refused = check(OPTIONS, dict(DEFAULTS, ds4_kv_disk_dir="/usr/local/lib/ds4"))
    assert refused == [
        "ds4_kv_disk_dir must be a directory of its own below /var/lib/ds4/..., /srv/..., /data/..., "
        '/mnt/... (it is handed to a user other than root); got "/usr/local/lib/ds4"'
    ]
    refused = check(OPTIONS, dict(DEFAULTS, ds4_kv_disk_dir="/var/lib/ds4/rollback"))
    assert refused == [
        "ds4_kv_disk_dir must be a directory of its own, not /var/lib/ds4/rollback, which the roles keep "
        'for root; got "/var/lib/ds4/rollback"'
    ]
    assert check(OPTIONS, dict(DEFAULTS, ds4_gguf_dir="/home/spark/gguf")) == [
        "ds4_gguf_dir may be below /home/spark only when ds4_weights_owner is spark (a home is its user's to "
        'change), not root; got "/home/spark/gguf"'
    ]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
@pytest.mark.parametrize("firewall", [False, "false", "no"])
def test_an_engine_beyond_loopback_without_its_firewall_is_refused(host, firewall):
    """Issue 40: the engine has no key; beyond loopback only its firewall keeps other hosts out."""
    assert check(OPTIONS, dict(DEFAULTS, ds4_host=host, ds4_firewall=firewall)) == [
        f'ds4_host "{host}" is beyond loopback, where the engine, which has no key, is kept from other hosts '
        "by the engine firewall alone: it needs ds4_firewall true (with a gateway in the group gateways, or "
        "ds4_firewall_allow), or ds4_host 127.0.0.1; got ds4_firewall false"
    ]


@pytest.mark.parametrize(
    ("host", "firewall"),
    [("0.0.0.0", True), ("0.0.0.0", "true"), ("127.0.0.1", False), ("::1", False)],
)
def test_an_engine_on_loopback_or_behind_its_firewall_is_accepted(host, firewall):
    assert check(OPTIONS, dict(DEFAULTS, ds4_host=host, ds4_firewall=firewall)) == []


@pytest.mark.parametrize("host", ["localhost", "spark01.example"])
def test_the_engine_listens_on_an_address_never_a_name(host):
    """Issue 55, point 4: with ds4_host localhost, Debian's ::1 localhost sent the probes, the smoke test and
    the watchdog to [::1] first, where a stranger could listen, while the listener proof looked at
    127.0.0.1. The address the engine listens on is the address everything asks and proves."""
    assert check(OPTIONS, dict(DEFAULTS, ds4_host=host, ds4_firewall=True)) == [
        "ds4_host must be an IP address, not a name (a name may reach another address than the one whose "
        f"listener is proven: localhost is ::1 first on Debian): {host!r}"
    ]


@pytest.mark.parametrize(
    ("interval", "rendered"), [(0.5, "inter 500ms"), (2, "inter 2000ms"), (1.25, "inter 1250ms")]
)
def test_a_check_interval_reaches_haproxy_as_whole_milliseconds(interval, rendered):
    """HAProxy refuses "inter 0.5s": the template writes the accepted interval in milliseconds, exactly."""
    assert check(OPTIONS, dict(DEFAULTS, ds4_gateway_check_interval=interval)) == []
    # The template the role uses by default, wherever the role's default says it is.
    default = load("roles", "ds4_gateway", "defaults", "main.yml")["ds4_gateway_config_template"]
    template = (REPO / "roles" / "ds4_gateway" / "templates" / default).read_text()
    line = next(line for line in template.splitlines() if "default-server check" in line)
    text = (
        jinja2.Environment()
        .from_string(line)
        .render(ds4_gateway_check_interval=interval, ds4_gateway_check_fall=2, ds4_gateway_check_rise=1)
    )
    assert f" {rendered} " in text


@pytest.mark.parametrize(
    "address",
    ["10.0.0.5", "fd00::5", "spark01", "spark-01.lab.example", "spark_01"],
)
def test_a_spark_reached_at_a_host_name_or_an_address_is_accepted(address):
    assert gateway(addresses={"spark01": ("ansible_host", address)}) == []


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.5\n    server evil 203.0.113.9:80",
        "10.0.0.5 backup",
        "10.0.0.5:8000",
        "",
        "-spark",
        "spark#1",
        "[fd00::5]",
        42,
        ["10.0.0.5"],
    ],
)
@pytest.mark.parametrize("variable", ["ansible_host", "ds4_gateway_backend_address"])
def test_a_spark_address_haproxy_would_read_otherwise_is_refused(variable, address):
    """The address goes into HAProxy's server line: a newline or a word would be configuration."""
    refused = gateway(addresses={"spark01": (variable, address)})
    assert refused == [
        f"{variable} of spark01 must be a host name, an IPv4 or an IPv6 address (it is the gateway's "
        f"server line for the Spark); got {json.dumps(address)}"
    ]


def test_a_spark_name_haproxy_would_read_otherwise_is_refused():
    refused = gateway(sparks=("spark 01",), addresses={"spark 01": ("inventory name", "spark 01")})
    assert refused[0].startswith("the inventory name of spark 01 must be a HAProxy name")


@pytest.mark.parametrize(
    "changes",
    [
        {"ds4_kv_disk_dir": "/srv/ds4/kv", "ds4_gguf_dir": "/srv/ds4/gguf"},
        {"ds4_kv_disk_dir": "/mnt/ds4-nvme/kv", "ds4_gguf_dir": "/data/ds4/gguf"},
        {"ds4_kv_disk_dir": "/srv/ds4_kv", "ds4_gguf_dir": "/mnt/ds4.models/gguf"},
        {"ds4_gguf_dir": "/home/spark/gguf", "ds4_weights_owner": "spark"},
    ],
)
def test_a_directory_below_an_allowed_root_is_accepted(changes):
    assert check(OPTIONS, dict(DEFAULTS, **changes)) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        # Another service's tree on a shared mount: handing it to the service user gives that away.
        ("/srv/www", "a directory named for ds4 directly below /srv, /data or /mnt (such as /srv/ds4/"),
        ("/mnt/nvme", "a directory named for ds4 directly below /srv, /data or /mnt (such as /srv/ds4/"),
        # Issue 55, point 6: "ds4" deeper in another's tree named it for ds4 by a substring test.
        ("/srv/www/html/ds4-kv", "a directory named for ds4 directly below /srv, /data or /mnt"),
        ("/mnt/backups/ds4", "a directory named for ds4 directly below /srv, /data or /mnt"),
        ("/mnt/nvme/ds4-kv", "a directory named for ds4 directly below /srv, /data or /mnt"),
        ("/srv/myds4/kv", "a directory named for ds4 directly below /srv, /data or /mnt"),
        ("/data/nods4", "a directory named for ds4 directly below /srv, /data or /mnt"),
        # Root's own files in ds4's data directory: the update check's and the watchdog's state.
        (
            "/var/lib/ds4/update-check.json",
            "not /var/lib/ds4/update-check.json, which the roles keep for root",
        ),
        ("/var/lib/ds4/watchdog.json", "not /var/lib/ds4/watchdog.json, which the roles keep for root"),
    ],
)
def test_a_handed_directory_needs_a_ds4_named_directory_and_is_never_root_s_own_file(value, why):
    refused = check(OPTIONS, dict(DEFAULTS, ds4_kv_disk_dir=value))
    assert len(refused) == 1 and why in refused[0], refused


@pytest.mark.parametrize("value", ["/usr/local/lib/ds4", "/root/metrics", "/var/lib/ds4/rollback"])
def test_the_textfile_directory_the_root_run_watchdog_writes_in_is_confined(value):
    refused = check(OPTIONS, dict(DEFAULTS, ds4_node_exporter_textfile_dir=value))
    assert len(refused) == 1 and refused[0].startswith(
        "ds4_node_exporter_textfile_dir must be a directory of"
    ), refused


@pytest.mark.parametrize("value", ["/var/lib/prometheus/node-exporter", "/srv/site-textfile"])
def test_the_package_s_or_a_site_s_textfile_directory_is_accepted(value):
    assert check(OPTIONS, dict(DEFAULTS, ds4_node_exporter_textfile_dir=value)) == []


def test_a_release_pinned_by_commit_must_carry_its_commit():
    commit = "67bd55c0a1b2" + "0" * 28
    assert (
        check(OPTIONS, dict(DEFAULTS, ds4_release="dwarfstar-g67bd55c0a1b2", ds4_release_commit=commit)) == []
    )
    assert check(OPTIONS, dict(DEFAULTS, ds4_release="g67bd55c0a1b2", ds4_release_commit="")) == [
        "ds4_release g67bd55c0a1b2 names a release pinned by commit: ds4_release_commit must be its full "
        'commit, 40 hex digits, beginning 67bd55c0a1b2; got ""'
    ]
    assert check(OPTIONS, dict(DEFAULTS, ds4_release="g111111111111", ds4_release_commit=commit)) == [
        "ds4_release g111111111111 must carry the first 12 hex digits of ds4_release_commit (67bd55c0a1b2); "
        'got "g111111111111"'
    ]


def test_a_lineage_mismatch_is_refused_naming_the_variables():
    upstream = dict(DEFAULTS, ds4_release="g67bd55c0a1b2", ds4_release_commit="67bd55c0a1b2" + "0" * 28)
    assert check(OPTIONS, upstream) == []
    assert check(OPTIONS, dict(upstream, ds4_model_generation="legacy", ds4_speculation="mtp")) == [
        "ds4_speculation 'mtp' (the legacy MTP head) is the fork's: ds4_engine_lineage upstream speculates "
        "with dspark (its DSpark support file) or none (plain)"
    ]
    fork_with_upstream_flag = dict(DEFAULTS, ds4_extra_args=["--power", "100"])
    assert check(OPTIONS, fork_with_upstream_flag) == [
        "ds4_extra_args has --power, upstream's own flag(s), but ds4_engine_lineage makes this Spark run the "
        "fork, whose ds4-server refuses them as unknown options: remove them, or run upstream "
        "(ds4_engine_lineage: upstream with a release pinned by commit)"
    ]
    assert check(OPTIONS, dict(upstream, ds4_extra_args=["--power", "100"])) == []
    assert check(OPTIONS, dict(fork_with_upstream_flag, ds4_engine_lineage="upstream")) == []


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (
            {"ds4_pair_port": 9100},
            "ds4_node_exporter_port 9100 is also ds4_pair_port: each port a Spark listens on is its own "
            "(ds4_port, ds4_pair_port, ds4_weights_peer_port, ds4_node_exporter_port)",
        ),
        (
            {"ds4_weights_peer_port": 8000},
            "ds4_weights_peer_port 8000 is also ds4_port: each port a Spark listens on is its own "
            "(ds4_port, ds4_pair_port, ds4_weights_peer_port, ds4_node_exporter_port)",
        ),
        ({"ds4_pair_port": 22}, "ds4_pair_port 22 is SSH's port, which the Sparks are reached on"),
        (
            {"ds4_node_exporter_port": 22},
            "ds4_node_exporter_port 22 is SSH's port, which the Sparks are reached on",
        ),
    ],
)
def test_a_port_that_is_another_services_on_the_spark_is_refused(changes, said):
    """Issue 55, point 10: ports were only range-checked, and ds4_pair_port 9100 had the pair's rules reset
    node_exporter's port."""
    assert check(OPTIONS, dict(DEFAULTS, **changes)) == [said]
