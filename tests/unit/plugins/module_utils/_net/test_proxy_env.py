"""The site's proxy (ds4_proxy_env) reaches the modules that use the network through their own option,
never the remote shell's command line: module_utils/_net/proxy_env.py, the four modules that take it, and
a playbook at -vvv."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import (
    PROXY_NAMES,
    ProxyEnvError,
    apply_proxy_env,
)
from ansible_collections.ds4.fleet.plugins.modules import (
    ds4_hub_file,
    ds4_release_build,
    ds4_release_plan,
    ds4_weights_plan,
)
from module_runner import run_module

ROOT = Path(__file__).resolve().parents[5]
MARKER = "Px-4c1d9-PROXYPASS"
COMMIT = "0e05c4f2672023b3d6aa0cba32b1aaa8465d10b3"
SPARK = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
BASE_LEGACY = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"
# A git that records its command line and environment, lists the tag v0.6.5, fetches it (for its
# Makefile, which names no cuda-spark) and fails anything else.
FAKE_GIT = f"""#!/bin/sh
{{ printf 'ARGV %s\\n' "$*"; env | sed 's/^/ENV /'; }} >> "$FAKE_GIT_LOG"
case " $* " in
  *" ls-remote "*) printf '{COMMIT}\\trefs/tags/v0.6.5\\n' ;;
  *" init "*|*" fetch "*) ;;
  *" rev-parse "*) printf '{COMMIT}\\n' ;;
  *" cat-file "*) printf 'cuda:\\n\\techo\\n' ;;
  *) echo "fatal: unable to access the repository" >&2; exit 128 ;;
esac
"""


@pytest.fixture(autouse=True)
def no_proxy_around(monkeypatch):
    """No proxy variable of this process reaches the test, and whatever a module sets here is undone."""
    for name in PROXY_NAMES:
        for spelled in (name, name.upper()):
            # Set, then removed: monkeypatch restores both steps, so a variable the module sets is removed.
            monkeypatch.setenv(spelled, "")
            monkeypatch.delenv(spelled)


@pytest.fixture
def git_log(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = bin_dir / "git"
    git.write_text(FAKE_GIT)
    git.chmod(0o755)
    log = tmp_path / "git.log"
    monkeypatch.setenv("FAKE_GIT_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.fixture
def proxy():
    """A proxy that records what each request asked of it (its target and Proxy-Authorization) and
    answers 502: enough to show a client went through it, and with what."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            seen.append((self.command, self.path, self.headers.get("Proxy-Authorization", "")))
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_CONNECT = _answer

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def git_calls(log):
    """[(argv, {name: value})] of each fake git run."""
    calls = []
    for line in log.read_text().splitlines():
        if line.startswith("ARGV "):
            calls.append((line[5:], {}))
        elif line.startswith("ENV ") and calls:
            name, _, value = line[4:].partition("=")
            calls[-1][1][name] = value
    return calls


def test_the_proxy_is_set_in_the_environment_and_its_password_masked():
    environ, no_log = {"PATH": "/usr/bin"}, set()
    apply_proxy_env(
        {"https_proxy": f"http://u:{MARKER}@proxy:3128", "NO_PROXY": "127.0.0.1,localhost"}, environ, no_log
    )
    assert environ == {
        "PATH": "/usr/bin",
        "https_proxy": f"http://u:{MARKER}@proxy:3128",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    assert {MARKER, f"u:{MARKER}", f"http://u:{MARKER}@proxy:3128"} <= no_log
    # A token in the user's place is the secret; %-encoded, both spellings are.
    no_log = set()
    apply_proxy_env({"http_proxy": "http://tok%2Fen@proxy:3128"}, {}, no_log)
    assert {"tok%2Fen", "tok/en"} <= no_log


@pytest.mark.parametrize(
    "bad, said",
    [
        ({"LD_PRELOAD": "/tmp/x.so"}, "not LD_PRELOAD"),
        ({f"http://u:{MARKER}@proxy:3128": "x"}, "not a name that is no variable name"),
        ({"https_proxy": ["http://proxy:3128"]}, "https_proxy must be a string"),
    ],
)
def test_another_variable_or_a_value_that_is_no_string_is_refused_before_anything_is_set(bad, said):
    environ = {}
    with pytest.raises(ProxyEnvError) as refused:
        apply_proxy_env({"http_proxy": "http://proxy:3128", **bad}, environ, set())
    assert environ == {} and str(refused.value).startswith("proxy_env (ds4_proxy_env)")
    assert said in str(refused.value)
    for value in ("/tmp/x.so", "proxy:3128", MARKER):
        assert value not in str(refused.value)


def test_the_settings_check_allows_the_names_the_modules_apply():
    from ansible_collections.ds4.fleet.plugins.module_utils._run.settings import RULES

    rule = RULES["ds4_proxy_env"]
    assert all(rule({name: "x", name.upper(): "x"}) is None for name in PROXY_NAMES)
    assert rule({"LD_PRELOAD": "x"}) is not None


def test_release_plan_gives_git_ls_remote_the_proxy_in_its_environment_alone(git_log, tmp_path):
    proxy_url = f"http://u:{MARKER}@proxy.example:3128"
    rc, out = run_module(
        ds4_release_plan,
        {
            "root": str(tmp_path / "ds4"),
            "release": "v0.6.5",
            "repo": "https://forge.example/ds4.git",
            "build_target": SPARK,
            "cuda_version": "13.0",
            "log_dir": str(tmp_path / "logs"),
            "tags_record": str(tmp_path / "tags.json"),
            "proxy_env": {"https_proxy": proxy_url, "no_proxy": "127.0.0.1"},
        },
    )
    assert rc == 0 and out["commit"] == COMMIT, out
    # The tag's lookup and the fetch that reads its Makefile: each through the proxy, in its environment.
    remote = [(argv, env) for argv, env in git_calls(git_log) if "ls-remote" in argv or "fetch" in argv]
    assert [argv.split()[0] if "ls-remote" in argv else "fetch" for argv, _ in remote] == [
        "ls-remote",
        "fetch",
    ]
    for argv, env in remote:
        assert MARKER not in argv
        assert (env["https_proxy"], env["no_proxy"]) == (proxy_url, "127.0.0.1")
    assert MARKER not in json.dumps(out)


def test_release_build_clones_through_the_proxy_and_no_log_or_message_holds_it(git_log, tmp_path):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\nexit 0\n")
    nvcc.chmod(0o755)
    proxy_url = f"http://u:{MARKER}@proxy.example:3128"
    rc, out = run_module(
        ds4_release_build,
        {
            "root": str(tmp_path / "ds4"),
            "release": "v0.6.5",
            "commit": COMMIT,
            "repo": "https://forge.example/ds4.git",
            "build_target": SPARK,
            "cuda_version": "13.0",
            "nvcc": str(nvcc),
            "log_dir": str(tmp_path / "logs"),
            "tags_record": str(tmp_path / "tags.json"),
            "proxy_env": {"HTTPS_PROXY": proxy_url},
        },
    )
    # The fake git refuses the clone: the build fails there, having been given the proxy.
    assert rc == 1 and "cloning tag v0.6.5" in out["msg"], out
    [(argv, env)] = git_calls(git_log)
    assert "clone" in argv and MARKER not in argv
    assert env["HTTPS_PROXY"] == proxy_url
    assert MARKER not in json.dumps(out)
    assert MARKER not in (tmp_path / "logs" / "build-v0.6.5.log").read_text()


def test_weights_plan_asks_the_hub_through_the_proxy(proxy, hub, hub_files, tmp_path):
    address, seen = proxy
    legacy = hub_files[BASE_LEGACY]
    entry = {"name": BASE_LEGACY, "repo": legacy["repo"], "revision": "main", "size": None, "sha256": None}
    rc, out = run_module(
        ds4_weights_plan,
        {
            "catalog": {"legacy": {"files": {"base": entry}}},
            "generation": "legacy",
            "speculation": "plain",
            "gguf_dir": str(tmp_path / "gguf"),
            "endpoint": hub.endpoint,
            "timeout": 5,
            "proxy_env": {"http_proxy": f"http://u:{MARKER}@{address}"},
        },
    )
    # The proxy answers 502: the size could not be asked, and the proxy saw the request, with its login.
    assert rc == 1, out
    assert seen and seen[0][1].startswith(hub.endpoint) and seen[0][2].startswith("Basic ")
    assert MARKER not in json.dumps(out)


def test_hub_file_fetches_through_the_proxy(proxy, hub, hub_files, tmp_path):
    address, seen = proxy
    rc, out = run_module(
        ds4_hub_file,
        {
            "endpoint": hub.endpoint,
            "repo": hub_files[DRAFTER]["repo"],
            "file": DRAFTER,
            "dest": str(tmp_path),
            "retries": 0,
            "retry_delay": 0.01,
            "proxy_env": {"HTTP_PROXY": f"http://u:{MARKER}@{address}"},
        },
    )
    assert rc == 1, out
    assert seen and seen[0][1].startswith(hub.endpoint) and seen[0][2].startswith("Basic ")
    assert MARKER not in json.dumps(out)


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Resolve the release tag through the site's proxy
      ds4.fleet.ds4_release_plan:
        root: "{{ root }}"
        release: v0.6.5
        repo: https://forge.example/ds4.git
        build_target: {arch: sm_121, make_target: cuda, make_args: []}
        cuda_version: "13.0"
        log_dir: "{{ root }}/logs"
        tags_record: "{{ root }}/tags.json"
        proxy_env: "{{ ds4_proxy_env }}"
"""


def play_at_vvv(tmp_path, playbook, proxy_url):
    """ansible-playbook -vvv of PLAYBOOK on localhost with ds4_proxy_env holding PROXY_URL: its output."""
    (tmp_path / "play.yml").write_text(playbook)
    (tmp_path / "vars.json").write_text(
        json.dumps({"root": str(tmp_path / "ds4"), "ds4_proxy_env": {"https_proxy": proxy_url}})
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    command = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-vvv",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        "@vars.json",
        "play.yml",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and COMMIT in out, out[-3000:]
    return out


def test_through_ansible_at_vvv_the_proxy_password_is_on_no_command_line(git_log, tmp_path):
    """The real path, as the engine's preflight runs it: the task's `environment:` puts the proxy on the
    EXEC line that -vvv prints (and ps shows), as the roles did before; `proxy_env` keeps it inside the
    module's arguments."""
    proxy_url = f"http://u:{MARKER}@proxy.example:3128"
    option = '        proxy_env: "{{ ds4_proxy_env }}"'
    keyword = PLAYBOOK.replace(option, '      environment: "{{ ds4_proxy_env }}"')
    exec_lines = [line for line in play_at_vvv(tmp_path, keyword, proxy_url).splitlines() if "EXEC " in line]
    # The detector sees the leak where there is one.
    assert any(MARKER in line for line in exec_lines)
    git_log.unlink()
    out = play_at_vvv(tmp_path, PLAYBOOK, proxy_url)
    assert "EXEC /bin/sh -c" in out
    assert MARKER not in out
    remote = [(argv, env) for argv, env in git_calls(git_log) if "ls-remote" in argv or "fetch" in argv]
    assert len(remote) == 2
    assert all(MARKER not in argv and git_env["https_proxy"] == proxy_url for argv, git_env in remote)
