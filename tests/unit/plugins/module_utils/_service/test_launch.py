"""Launch settings -> environment file and ds4-server arguments: _service/launch.py and its module."""

import hashlib
import json
import stat
import subprocess

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.digest import keyed
from ansible_collections.ds4.fleet.plugins.module_utils._service.launch import (
    LaunchConfigError,
    launch_config,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_launch_config
from module_runner import run_module

BASE = "/var/lib/ds4/models/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER = "/var/lib/ds4/models/DSpark-drafter-Q2K-Q8-0731.gguf"
LEGACY_BASE = "/var/lib/ds4/models/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
LEGACY_DRAFTER = "/var/lib/ds4/models/DSpark-drafter-Q2K-Q8.gguf"
MTP = "/var/lib/ds4/models/DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
SUPPORT = "/var/lib/ds4/models/DeepSeek-V4-Flash-DSpark-support-0731.gguf"

MINIMAL = {"release_dir": "/opt/ds4/current", "base_model": BASE, "dspark_model": DRAFTER}
LEGACY = {
    "release_dir": "/opt/ds4/current",
    "base_model": LEGACY_BASE,
    "dspark_model": LEGACY_DRAFTER,
    "mtp_model": MTP,
    "model_generation": "legacy",
}
COMMON_ARGS = ["--host", "127.0.0.1", "--port", "8000"]
DISK_AND_FLOOR = ["--kv-disk-dir", "/var/lib/ds4/kv", "--kv-disk-space-mb", "4096", "--mem-floor-gb", "4"]

HOST_WHY = (
    "ds4_host must be an IP address, not a name (a name may reach another address than the one whose "
    "listener is proven: localhost is ::1 first on Debian): "
)


def settings(base=None, **changes):
    return {**(MINIMAL if base is None else base), **changes}


@pytest.mark.parametrize(
    ("given", "env_lines", "args"),
    [
        pytest.param(
            MINIMAL,
            [
                "DS4_NO_UPDATE_CHECK=1",
                "DS4_LOCK_FILE=/run/ds4/ds4.lock",
                "DS4_CONT_DSPARK=1",
                f"DS4_DSPARK_MODEL={DRAFTER}",
            ],
            ["--cuda", "-m", BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR],
            id="0731-dspark-defaults",
        ),
        pytest.param(
            settings(lineage="upstream", dspark_model=SUPPORT),
            ["DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock"],
            [
                "--cuda",
                "-m",
                BASE,
                "-c",
                "524288",
                *COMMON_ARGS,
                *DISK_AND_FLOOR,
                "--dspark",
                "--mtp-model",
                SUPPORT,
            ],
            id="0731-dspark-upstream",
        ),
        pytest.param(
            settings(lineage="upstream", speculation="plain", dspark_model=None),
            ["DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock"],
            ["--cuda", "-m", BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR, "--no-spec"],
            id="0731-plain-upstream",
        ),
        pytest.param(
            settings(speculation="plain", dspark_model=None),
            ["DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock"],
            ["--cuda", "-m", BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR, "--no-spec"],
            id="0731-plain",
        ),
        pytest.param(
            LEGACY,
            [
                "DS4_NO_UPDATE_CHECK=1",
                "DS4_LOCK_FILE=/run/ds4/ds4.lock",
                "DS4_CONT_DSPARK=1",
                f"DS4_DSPARK_MODEL={LEGACY_DRAFTER}",
            ],
            ["--cuda", "-m", LEGACY_BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR],
            id="legacy-dspark",
        ),
        pytest.param(
            settings(LEGACY, speculation="mtp"),
            ["DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock", "DS4_CONT_MTP_MODE=2"],
            ["--cuda", "-m", LEGACY_BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR, "--mtp", MTP],
            id="legacy-mtp",
        ),
        pytest.param(
            settings(LEGACY, speculation="plain"),
            ["DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock"],
            ["--cuda", "-m", LEGACY_BASE, "-c", "524288", *COMMON_ARGS, *DISK_AND_FLOOR, "--no-spec"],
            id="legacy-plain",
        ),
        pytest.param(
            settings(
                ctx="65536",
                host="0.0.0.0",
                port="9000",
                kv_disk_dir="",
                mem_floor_gb="",
                lock_file="/var/lib/ds4/ds4.lock",
                extra_args=["--cors", "-n", 512],
                extra_env={"DS4_SERVER_MAX_CLIENTS": 64, "CUDA_VISIBLE_DEVICES": "0"},
            ),
            [
                "DS4_NO_UPDATE_CHECK=1",
                "DS4_LOCK_FILE=/var/lib/ds4/ds4.lock",
                "DS4_CONT_DSPARK=1",
                f"DS4_DSPARK_MODEL={DRAFTER}",
                "CUDA_VISIBLE_DEVICES=0",
                "DS4_SERVER_MAX_CLIENTS=64",
            ],
            ["--cuda", "-m", BASE, "-c", "65536", "--host", "0.0.0.0", "--port", "9000"]
            + ["--cors", "-n", "512"],
            id="strings-from-extra-vars-disk-off-floor-off-extras",
        ),
        pytest.param(
            settings(kv_disk_dir="/srv/kv/", kv_disk_space_mb=20480, mem_floor_gb=0, ctx=None, port=None),
            [
                "DS4_NO_UPDATE_CHECK=1",
                "DS4_LOCK_FILE=/run/ds4/ds4.lock",
                "DS4_CONT_DSPARK=1",
                f"DS4_DSPARK_MODEL={DRAFTER}",
            ],
            ["--cuda", "-m", BASE, "-c", "524288", *COMMON_ARGS]
            + ["--kv-disk-dir", "/srv/kv", "--kv-disk-space-mb", "20480", "--mem-floor-gb", "0"],
            id="null-takes-default",
        ),
    ],
)
def test_launch_config(given, env_lines, args):
    result = launch_config(given)
    assert result["env_lines"] == env_lines
    assert result["env_content"] == "".join(line + "\n" for line in env_lines)
    assert result["args"] == args
    assert result["binary"] == "/opt/ds4/current/ds4-server"
    assert result["exec_start"] == " ".join(["/opt/ds4/current/ds4-server", *args])


def test_settings_are_returned_normalised():
    result = launch_config(settings(ctx="65536", kv_disk_dir="", mem_floor_gb=""))
    assert result["settings"] == {
        "release_dir": "/opt/ds4/current",
        "base_model": BASE,
        "dspark_model": DRAFTER,
        "mtp_model": None,
        "speculation": "dspark",
        "lineage": "fork",
        "model_generation": "0731",
        "ctx": 65536,
        "host": "127.0.0.1",
        "port": 8000,
        "kv_disk_dir": None,
        "kv_disk_space_mb": 4096,
        "mem_floor_gb": None,
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


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": 0}, "ds4_port must be a port number from 1 to 65535: 0"),
        ({"port": 65536}, "ds4_port must be a port number from 1 to 65535: 65536"),
        ({"port": "80a"}, "ds4_port must be a port number from 1 to 65535: '80a'"),
        ({"port": True}, "ds4_port must be a port number from 1 to 65535: True"),
        ({"port": 8000.0}, "ds4_port must be a port number from 1 to 65535: 8000.0"),
        ({"ctx": "abc"}, "ds4_ctx must be a positive whole number of tokens: 'abc'"),
        ({"ctx": 0}, "ds4_ctx must be a positive whole number of tokens: 0"),
        ({"ctx": -4096}, "ds4_ctx must be a positive whole number of tokens: -4096"),
        ({"ctx": "-4096"}, "ds4_ctx must be a positive whole number of tokens: '-4096'"),
        ({"ctx": " 4096"}, "ds4_ctx must be a positive whole number of tokens: ' 4096'"),
        ({"ctx": "４０９６"}, "ds4_ctx must be a positive whole number of tokens: '４０９６'"),
        ({"ctx": False}, "ds4_ctx must be a positive whole number of tokens: False"),
        ({"kv_disk_space_mb": 0}, "ds4_kv_disk_space_mb must be a positive whole number of MiB: 0"),
        (
            {"mem_floor_gb": -1},
            "ds4_mem_floor_gb must be a whole number of GiB, or '' to leave the flag out: -1",
        ),
        ({"speculation": "eagle"}, "ds4_speculation must be one of dspark, mtp, plain: 'eagle'"),
        ({"model_generation": ""}, "ds4_model_generation must be a generation name in quotes: ''"),
        (
            {"model_generation": 473},
            "ds4_model_generation must be a generation name in quotes: 473 "
            "(an unquoted 0731 in YAML is a number: write '0731' in quotes)",
        ),
        (
            {"dspark_model": None},
            "the drafter path (ds4_gguf_dir, ds4_model_catalog) must be an absolute path to the drafter GGUF "
            "for dspark: None",
        ),
        (
            {"base_model": "base.gguf"},
            "the base model path (ds4_gguf_dir, ds4_model_catalog) must be an absolute path to the base "
            "GGUF: 'base.gguf'",
        ),
        (
            {"release_dir": None},
            "the release directory (ds4_root, ds4_release) must be an absolute path: None",
        ),
        ({"lock_file": "ds4.lock"}, "the lock file must be an absolute path: 'ds4.lock'"),
        (
            {"kv_disk_dir": False},
            "ds4_kv_disk_dir must be an absolute path, or '' to keep KV banks off disk: False",
        ),
        (
            {"base_model": "/m/a\nb.gguf"},
            "the base model path (ds4_gguf_dir, ds4_model_catalog) must not contain control characters "
            "such as a newline: '/m/a\\nb.gguf'",
        ),
        (
            {"host": "-0.0.0.0"},
            HOST_WHY + "'-0.0.0.0'",
        ),
        (
            {"host": "a b"},
            HOST_WHY + "'a b'",
        ),
        (
            {"host": ""},
            HOST_WHY + "''",
        ),
        ({"extra_args": "--cors"}, "ds4_extra_args must be a list of strings: '--cors'"),
        ({"extra_args": ["--port", "9000"]}, "ds4_extra_args must not contain '--port': set ds4_port"),
        ({"extra_args": ["--port=9000"]}, "ds4_extra_args must not contain '--port=9000': set ds4_port"),
        ({"extra_args": ["-c", "8192"]}, "ds4_extra_args must not contain '-c': set ds4_ctx"),
        ({"extra_args": ["--no-spec"]}, "ds4_extra_args must not contain '--no-spec': set ds4_speculation"),
        (
            {"extra_args": ["--dspark", DRAFTER]},
            "ds4_extra_args must not contain '--dspark': set ds4_speculation",
        ),
        (
            {"extra_args": ["-m", BASE]},
            "ds4_extra_args must not contain '-m': the model is passed from the model settings",
        ),
        (
            {"extra_args": ["--version"]},
            "ds4_extra_args must not contain '--version': it makes ds4-server exit instead of serving",
        ),
        ({"extra_args": [True]}, "ds4_extra_args items must be a string: True"),
        (
            {"extra_args": ["--cors\n--port"]},
            "ds4_extra_args items must not contain control characters such as a newline: '--cors\\n--port'",
        ),
        # Nothing of ds4_extra_env is shown: a value, or a name that is no variable name, may be a secret.
        ({"extra_env": ["A=1"]}, "ds4_extra_env must be a mapping of variable names to strings, not a list"),
        ({"extra_env": "A=1"}, "ds4_extra_env must be a mapping of variable names to strings, not a str"),
        (
            {"extra_env": {"cuda_visible_devices": "0"}},
            "ds4_extra_env names must be UPPERCASE letters, digits and _, not starting with a digit: 1 of 1 "
            "are not (not shown: one may be a secret)",
        ),
        (
            {"extra_env": {"1X": "0", "A-B": "0", "OK": "1"}},
            "ds4_extra_env names must be UPPERCASE letters, digits and _, not starting with a digit: 2 of 3 "
            "are not (not shown: one may be a secret)",
        ),
        (
            {"extra_env": {"DS4_LOCK_FILE": "/tmp/x"}},
            "ds4_extra_env must not set DS4_LOCK_FILE, which ds4-fleet manages: the service keeps its lock "
            "in its runtime directory",
        ),
        (
            {"extra_env": {"DS4_NO_UPDATE_CHECK": "0"}},
            "ds4_extra_env must not set DS4_NO_UPDATE_CHECK, which ds4-fleet manages: "
            "the engine's own update check stays off; the ds4-update-check timer replaces it",
        ),
        (
            {"extra_env": {"DS4_CONT_DSPARK": "0"}},
            "ds4_extra_env must not set DS4_CONT_DSPARK, which ds4-fleet manages: set ds4_speculation",
        ),
        # An environment value may be a secret: a message names the variable, never the value.
        ({"extra_env": {"X": False}}, "ds4_extra_env value of X must be a string"),
        ({"extra_env": {"X": None}}, "ds4_extra_env value of X must be a string"),
        (
            {"extra_env": {"X": "a\nDS4_LOCK_FILE=/tmp/x"}},
            "ds4_extra_env value of X must not contain control characters such as a newline",
        ),
        ({"prot": 9000}, "unknown launch settings: 'prot'"),
    ],
)
def test_launch_config_refuses(changes, message):
    with pytest.raises(LaunchConfigError) as info:
        launch_config(settings(**changes))
    assert info.value.errors == [message]
    assert str(info.value) == message


def test_mtp_needs_its_file():
    with pytest.raises(LaunchConfigError) as info:
        launch_config(settings(LEGACY, speculation="mtp", mtp_model=None))
    assert info.value.errors == [
        "the MTP model path (ds4_gguf_dir, ds4_model_catalog) must be an absolute path to the MTP GGUF "
        "for mtp: None"
    ]


def test_a_generation_added_to_the_catalog_launches():
    # The generations are the catalog's (data), not a list in the launcher.
    cfg = launch_config(settings(model_generation="0932"))
    assert cfg["settings"]["model_generation"] == "0932"


def test_all_errors_are_reported_together():
    with pytest.raises(LaunchConfigError) as info:
        launch_config(settings(port=70000, ctx="abc", extra_args=["--port", "1"]))
    assert info.value.errors == [
        "ds4_ctx must be a positive whole number of tokens: 'abc'",
        "ds4_port must be a port number from 1 to 65535: 70000",
        "ds4_extra_args must not contain '--port': set ds4_port",
    ]
    assert str(info.value) == "; ".join(info.value.errors)


def test_settings_must_be_a_mapping():
    with pytest.raises(LaunchConfigError, match=r"launch settings must be a mapping: \['port'\]"):
        launch_config(["port"])


AWKWARD = {
    "PLAIN": "/a/b.gguf",
    "SPACES": "two words",
    "QUOTES": 'it\'s "quoted"',
    "SHELLISH": "$HOME `id` \\n %i ${X}",
    "EMPTY": "",
    "HASH": "#not-a-comment",
    "UNICODE": "modèle",
}


def test_env_file_quoting():
    lines = launch_config(settings(extra_env=AWKWARD))["env_lines"][4:]
    assert lines == [
        'EMPTY=""',
        'HASH="#not-a-comment"',
        "PLAIN=/a/b.gguf",
        'QUOTES="it\'s \\"quoted\\""',
        'SHELLISH="\\$HOME \\`id\\` \\\\n %i \\${X}"',
        'SPACES="two words"',
        'UNICODE="modèle"',
    ]


def test_env_file_reads_back_in_a_shell(tmp_path):
    # systemd's EnvironmentFile= and a POSIX shell agree on bare words and on double quotes with
    # \\ \" \$ \` escaped, the only forms written; a shell proves the file reads back value for value.
    env_file = tmp_path / "ds4.env"
    env_file.write_text(launch_config(settings(extra_env=AWKWARD))["env_content"], encoding="utf-8")
    dump = f"import json, os; print(json.dumps({{k: os.environ[k] for k in {sorted(AWKWARD)!r}}}))"
    out = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; exec python3 -c "$2"', "sh", str(env_file), dump],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == AWKWARD


def test_exec_start_quoting():
    result = launch_config(
        settings(
            base_model="/models/my model.gguf",
            extra_args=["--tag", 'say "hi"', "100%", "$HOME", "a\\b", ";", ""],
        )
    )
    assert result["args"][2] == "/models/my model.gguf"
    assert result["exec_start"] == (
        '/opt/ds4/current/ds4-server --cuda -m "/models/my model.gguf" -c 524288 --host 127.0.0.1 '
        "--port 8000 --kv-disk-dir /var/lib/ds4/kv --kv-disk-space-mb 4096 --mem-floor-gb 4 "
        '--tag "say \\"hi\\"" "100%%" "$$HOME" "a\\\\b" ";" ""'
    )


def _run_module(args):
    return run_module(ds4_launch_config, args)[1]


def test_module_returns_the_launch(monkeypatch):
    result = _run_module({**MINIMAL, "port": "9000", "_ansible_check_mode": True})
    assert result["changed"] is False
    assert "failed" not in result
    expected = launch_config({**MINIMAL, "port": "9000"})
    for key in ("env", "env_lines", "env_content", "binary", "args", "exec_start", "settings"):
        assert result[key] == expected[key]


def test_module_fails_naming_the_variable(monkeypatch):
    result = _run_module({**MINIMAL, "port": 70000, "ctx": "abc"})
    assert result["failed"] is True
    assert result["msg"] == (
        "ds4_ctx must be a positive whole number of tokens: 'abc'; "
        "ds4_port must be a port number from 1 to 65535: 70000"
    )
    assert len(result["errors"]) == 2


def test_module_keeps_a_string_extra_args_for_its_own_message(monkeypatch):
    result = _run_module({**MINIMAL, "extra_args": "--cors,--port=1"})
    assert result["msg"] == "ds4_extra_args must be a list of strings: '--cors,--port=1'"


KEY = b"k" * 32


def test_the_public_view_tells_a_secret_changed_without_showing_it():
    cfg = launch_config(settings(extra_env={"OPENAI_API_KEY": "sk-live-1", "LOG_LEVEL": "info"}), KEY)
    assert "OPENAI_API_KEY=sk-live-1\n" in cfg["env_content"]
    public = cfg["public"]
    assert "sk-live-1" not in repr(public)
    # Keyed by the Spark's key: a weak value cannot be found by hashing candidates.
    assert public["env"]["OPENAI_API_KEY"] == keyed("sk-live-1", KEY)
    assert hashlib.sha256(b"sk-live-1").hexdigest()[:12] not in repr(public)
    assert public["settings"]["extra_env"] == {k: public["env"][k] for k in ("LOG_LEVEL", "OPENAI_API_KEY")}
    assert public["args"] == cfg["args"]
    extra_env = {"OPENAI_API_KEY": "sk-live-2", "LOG_LEVEL": "info"}
    other = launch_config(settings(extra_env=extra_env), KEY)["public"]
    assert other["env"]["OPENAI_API_KEY"] != public["env"]["OPENAI_API_KEY"]
    assert other["env"]["LOG_LEVEL"] == public["env"]["LOG_LEVEL"]


def test_module_keys_the_digests_with_the_spark_s_key_made_once(tmp_path):
    key = tmp_path / "ds4-fleet" / "digest.key"
    args = {**MINIMAL, "extra_env": {"OPENAI_API_KEY": "sk-live-1"}, "digest_key": str(key)}
    # Bad settings are refused before anything is made; check mode makes nothing either.
    assert _run_module({**args, "port": 70000})["failed"] and not key.parent.exists()
    checked = _run_module({**args, "_ansible_check_mode": True})
    assert checked["changed"] is False and not key.parent.exists()
    made = _run_module(args)
    assert made["changed"] is True and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert made["public"]["env"]["OPENAI_API_KEY"] == keyed("sk-live-1", key.read_bytes())
    again = _run_module(args)
    assert again["changed"] is False and again["public"] == made["public"]


# --- a pair member (ds4_pairs): the distributed mode's flags ---------------------------------------------

COORDINATOR = {"dist_role": "coordinator", "dist_layers": "0:20", "dist_host": "10.77.0.1", "dist_port": 9400}
WORKER = dict(COORDINATOR, dist_role="worker", dist_layers="21:output")


def test_a_coordinator_listens_on_the_link_and_a_worker_registers_there():
    coordinator = launch_config(settings(**COORDINATOR))["args"]
    assert coordinator[-7:] == ["--role", "coordinator", "--layers", "0:20", "--listen", "10.77.0.1", "9400"]
    worker = launch_config(settings(**WORKER))["args"]
    assert worker[-7:] == ["--role", "worker", "--layers", "21:output", "--coordinator", "10.77.0.1", "9400"]
    alone = launch_config(settings())["args"]
    assert "--role" not in alone and launch_config(settings())["settings"]["dist_role"] is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dist_role": "leader"}, "the pair role (ds4_pairs) must be coordinator or worker: 'leader'"),
        ({"dist_layers": "21:output"},
         "the pair member's layers (ds4_pairs, ds4_model_catalog) of a coordinator must be 0:K: '21:output'"),
        ({"dist_role": "worker", "dist_layers": "0:20"}, "of a worker must be K:output: '0:20'"),
        ({"dist_host": "10.77.0.1 --role"},
         "the coordinator's link address (ds4_pairs) must be an IP address"),
        ({"dist_port": 0}, "the coordinator's link port (ds4_pairs, ds4_pair_port) must be a port number"),
    ],
)  # fmt: skip
def test_a_pair_member_launch_that_cannot_be_is_refused(changes, message):
    with pytest.raises(LaunchConfigError) as caught:
        launch_config(settings(**dict(COORDINATOR, **changes)))
    assert any(message in error for error in caught.value.errors), caught.value.errors


@pytest.mark.parametrize("flag", ["--role", "--layers", "--listen", "--coordinator"])
def test_the_distributed_flags_are_the_pair_declarations_alone(flag):
    with pytest.raises(
        LaunchConfigError, match=f"ds4_extra_args must not contain '{flag}': declare the pair"
    ):
        launch_config(settings(extra_args=[flag, "x"]))


# --- a pair in tensor mode: the worker runs ds4 (the CLI), rdma found at each start by our launcher -------

TENSOR = {"dist_mode": "tensor", "dist_host": "10.77.0.1", "dist_port": 9911, "lineage": "upstream",
          "dspark_model": SUPPORT}  # fmt: skip
LAUNCHER = "/usr/local/lib/ds4/ds4-rdma-launch"
RDMA = dict(TENSOR, dist_transport="rdma", rdma_launcher=LAUNCHER)


def test_a_tensor_worker_runs_the_cli_with_the_contracts_flags_behind_the_rdma_launcher():
    worker = launch_config(settings(**RDMA, dist_role="worker", dist_address="10.77.0.2"))
    assert worker["binary"] == "/opt/ds4/current/ds4"
    assert worker["args"] == ["--cuda", "-m", BASE, "--tensor-parallel", "--role", "worker", "--coordinator",
                              "10.77.0.1", "9911"]  # fmt: skip
    assert worker["exec_start"] == (
        f"/usr/bin/python3 -B {LAUNCHER} --address 10.77.0.2 --root /sys -- /opt/ds4/current/ds4 --cuda "
        f"-m {BASE} --tensor-parallel --role worker --coordinator 10.77.0.1 9911"
    )


def test_a_tensor_coordinator_serves_with_batched_sessions_and_tcp_needs_no_launcher():
    coordinator = launch_config(settings(**RDMA, dist_role="coordinator", dist_address="10.77.0.1"))
    assert coordinator["binary"] == "/opt/ds4/current/ds4-server"
    assert coordinator["args"][-8:] == ["--tensor-parallel", "--role", "coordinator", "--listen", "10.77.0.1",
                                        "9911", "--batched-session", "8"]  # fmt: skip
    assert "--layers" not in coordinator["args"] and "--transport" not in coordinator["args"]
    assert coordinator["exec_start"].startswith(
        f"/usr/bin/python3 -B {LAUNCHER} --address 10.77.0.1 --root /sys -- "
    )
    tcp = launch_config(settings(**TENSOR, dist_role="coordinator", dist_transport="tcp"))
    assert tcp["args"][-10:] == ["--tensor-parallel", "--role", "coordinator", "--listen", "10.77.0.1",
                                 "9911", "--transport", "tcp", "--batched-session", "8"]  # fmt: skip
    assert tcp["exec_start"].startswith("/opt/ds4/current/ds4-server ")
    worker = launch_config(settings(**TENSOR, dist_role="worker", dist_transport="tcp"))
    assert worker["args"][-2:] == ["--transport", "tcp"] and worker["exec_start"].startswith(
        "/opt/ds4/current/ds4 "
    )


def test_a_tensor_pair_speculates_on_its_coordinator_alone():
    # "Flash 0731 Q2 and MXFP4 with DSpark" (engine contract): the family's default speculation, upstream's
    # switch and support file, on the coordinator, which drafts; the worker's command line has none.
    coordinator = launch_config(settings(**RDMA, dist_role="coordinator", dist_address="10.77.0.1"))
    assert coordinator["settings"]["speculation"] == "dspark"
    assert coordinator["args"][coordinator["args"].index("--dspark") :][:3] == [
        "--dspark",
        "--mtp-model",
        SUPPORT,
    ]
    worker = launch_config(settings(**RDMA, dist_role="worker", dist_address="10.77.0.2"))
    assert not {"--dspark", "--mtp-model", "--mtp", "--no-spec"} & set(worker["args"])
    assert "DS4_CONT_DSPARK" not in worker["env"]


def test_a_tensor_member_of_a_streamed_family_does_not_stream():
    # The engine's tensor mode takes no --ssd-streaming (engine contract): each member holds its half of
    # every layer in memory, which the pair's memory check judged.
    for role in ("coordinator", "worker"):
        member = launch_config(
            settings(**TENSOR, dist_role=role, dist_transport="tcp", ssd_streaming_cache_gb=64)
        )
        assert "--ssd-streaming" not in member["args"], role
    alone = launch_config(settings(lineage="upstream", dspark_model=SUPPORT, ssd_streaming_cache_gb=64))
    assert alone["args"][-3:] == ["--ssd-streaming", "--ssd-streaming-cache-experts", "64GB"]


def test_the_rdma_launcher_reads_sysfs_where_it_is_pointed_and_at_the_real_path_by_default():
    # The sandbox points it at its stand-in device's tree (ds4_rdma_sysfs_root); a Spark reads /sys.
    pointed = launch_config(
        settings(**RDMA, dist_role="worker", dist_address="10.77.0.2", rdma_sysfs_root="/var/lib/standin/sys")
    )
    assert pointed["exec_start"].startswith(
        f"/usr/bin/python3 -B {LAUNCHER} --address 10.77.0.2 --root /var/lib/standin/sys -- "
        "/opt/ds4/current/ds4 "
    )
    real = launch_config(settings(**RDMA, dist_role="worker", dist_address="10.77.0.2"))
    assert " --root /sys -- " in real["exec_start"] and real["unit"]["limit_memlock"] == "infinity"
    # A host that cannot lift its locked memory (the sandbox's containers) gives rdma its own limit.
    held = launch_config(
        settings(**RDMA, dist_role="worker", dist_address="10.77.0.2", rdma_limit_memlock="8M")
    )
    assert held["unit"]["limit_memlock"] == "8M"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lineage": "fork", "dspark_model": DRAFTER},
         "the pair's mode (ds4_pairs) tensor is upstream's engine (--tensor-parallel): ds4_engine_lineage "
         "makes this Spark run the fork, which has no tensor mode"),
        ({"dist_layers": "21:output"},
         "the pair member's layers (ds4_pairs, ds4_model_catalog) is the pipeline's; a tensor pair splits "
         "every layer"),
        ({"dist_transport": "ib"}, "the pair's transport (ds4_pairs) must be rdma or tcp: 'ib'"),
        ({"dist_mode": "tp"}, "the pair's mode (ds4_pairs) must be pipeline or tensor: 'tp'"),
        ({"dist_address": None}, "the member's own link address (ds4_pairs) must be an IP address: None"),
        ({"rdma_launcher": "ds4-rdma-launch"}, "the RDMA launcher's path must be an absolute path"),
        ({"rdma_sysfs_root": "sys"}, "ds4_rdma_sysfs_root must be an absolute path: 'sys'"),
        ({"rdma_limit_memlock": "lots"},
         "ds4_rdma_limit_memlock must be infinity or a number of bytes with an optional K, M, G or T: "
         "'lots'"),
        ({"extra_args": ["--batched-session=4"]},
         "ds4_extra_args must not contain '--batched-session=4': a tensor pair's coordinator serves 8 "
         "sessions"),
    ],
)  # fmt: skip
def test_a_tensor_launch_that_cannot_be_is_refused(changes, message):
    given = {**RDMA, "dist_role": "coordinator", "dist_address": "10.77.0.1", **changes}
    with pytest.raises(LaunchConfigError) as caught:
        launch_config(settings(**given))
    assert any(message in error for error in caught.value.errors), caught.value.errors


@pytest.mark.parametrize("flag", ["--tensor-parallel", "--transport", "--rdma-device", "--rdma-gid-index"])
def test_the_tensor_flags_are_the_pair_declarations_and_the_launchers_alone(flag):
    with pytest.raises(LaunchConfigError, match=f"ds4_extra_args must not contain '{flag}'"):
        launch_config(settings(lineage="upstream", dspark_model=SUPPORT, extra_args=[flag, "x"]))


def test_each_lineage_refuses_what_its_engine_does_not_take():
    with pytest.raises(LaunchConfigError) as refused:
        launch_config(settings(extra_args=["--power", "100", "--think-level=high", "--batched-session", "8"]))
    assert refused.value.errors == [
        "ds4_extra_args has --batched-session, --power, --think-level, upstream's own flag(s), but "
        "ds4_engine_lineage makes this Spark run the fork, whose ds4-server refuses them as unknown options: "
        "remove them, or run upstream (ds4_engine_lineage: upstream with a release pinned by commit)"
    ]
    assert launch_config(settings(lineage="upstream", dspark_model=SUPPORT, extra_args=["--power", "100"]))[
        "args"
    ][-2:] == ["--power", "100"]
    with pytest.raises(LaunchConfigError) as refused:
        launch_config(settings(LEGACY, lineage="upstream", speculation="mtp"))
    assert refused.value.errors == [
        "ds4_speculation mtp (the legacy MTP head) is the fork's launch: ds4_engine_lineage upstream takes "
        "dspark or plain"
    ]
    for lineage in ("fork", "upstream"):
        with pytest.raises(LaunchConfigError, match=r"ds4_extra_args must not contain '--mtp-model'"):
            launch_config(settings(lineage=lineage, extra_args=["--mtp-model", DRAFTER]))
    with pytest.raises(LaunchConfigError, match=r"ds4_engine_lineage must be fork or upstream: 'dwarf'"):
        launch_config(settings(lineage="dwarf"))


# --- each model family's flags (issue 53) ---

GGUF = "/var/lib/ds4/gguf"
VISION = {
    "release_dir": "/opt/ds4/current",
    "base_model": f"{GGUF}/DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf",
    "dspark_model": f"{GGUF}/DSpark-drafter-Q2K-Q8-vision-exp.gguf",
    "vision_model": f"{GGUF}/DeepSeek-V4-Flash-Vision-Encoder.gguf",
    "model_generation": "vision-exp",
}
V41 = {
    "release_dir": "/opt/ds4/current",
    "base_model": f"{GGUF}/DeepSeek-V4.1-Flash-Q2.gguf",
    "speculation": "plain",
    "model_generation": "v4.1",
    "ctx": 32768,
    "ssd_streaming_cache_gb": 64,
    "power": 100,
}
GLM = {
    "release_dir": "/opt/ds4/current",
    "base_model": f"{GGUF}/GLM-5.3-Flash-Q2.gguf",
    "vision_model": f"{GGUF}/GLM-5.3-Flash-Vision-Encoder.gguf",
    "speculation": "mtp",
    "builtin_mtp": True,
    "model_generation": "glm-5.3",
    "ctx": 16384,
    "power": 100,
}


def test_vision_exp_loads_its_encoder_and_its_own_drafter():
    out = launch_config(VISION)
    assert out["args"][-2:] == ["--vision", VISION["vision_model"]]
    assert out["env"]["DS4_DSPARK_MODEL"] == VISION["dspark_model"]


def test_v41_streams_its_experts_with_a_pinned_cache_and_power_100_without_speculation():
    out = launch_config(V41)
    assert out["args"] == [
        "--cuda", "-m", V41["base_model"], "-c", "32768", *COMMON_ARGS, *DISK_AND_FLOOR, "--no-spec",
        "--ssd-streaming", "--ssd-streaming-cache-experts", "64GB", "--power", "100",
    ]  # fmt: skip


def test_glm_speculates_with_its_own_mtp_block_and_serves_images():
    out = launch_config(GLM)
    assert out["args"] == [
        "--cuda", "-m", GLM["base_model"], "-c", "16384", *COMMON_ARGS, *DISK_AND_FLOOR, "--mtp",
        "--power", "100", "--vision", GLM["vision_model"],
    ]  # fmt: skip
    assert "DS4_CONT_MTP_MODE" not in out["env"]


def test_glm_speculates_with_its_own_mtp_block_alone_on_either_lineage():
    # The legacy MTP head is the fork's launch alone; GLM's block is the model's own, which upstream serves.
    out = launch_config(dict(GLM, lineage="upstream"))
    assert out["args"][out["args"].index("--mtp") - 1 :] == [
        *DISK_AND_FLOOR[-1:], "--mtp", "--power", "100", "--vision", GLM["vision_model"],
    ]  # fmt: skip
    assert "--mtp-model" not in out["args"] and "--dspark" not in out["args"]


def test_vision_exp_with_the_0731_drafter_is_refused_naming_the_setting():
    with pytest.raises(LaunchConfigError) as e:
        launch_config(dict(VISION, dspark_model=DRAFTER))
    assert str(e.value) == (
        f"the drafter path (ds4_gguf_dir, ds4_model_catalog) {DRAFTER!r} is of the 0731 generation, and the "
        "base model 'DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf' "
        "(ds4_model_generation 'vision-exp') is not: a drafter pairs only with the base of its own generation"
    )


@pytest.mark.parametrize(
    "flag", ["--ssd-streaming", "--ssd-streaming-cache-experts=32GB", "--power", "--vision"]
)
def test_a_family_flag_is_the_catalogs_not_extra_args(flag):
    with pytest.raises(LaunchConfigError, match=f"ds4_extra_args must not contain '{flag}'"):
        launch_config(dict(V41, extra_args=[flag]))
