"""A sandbox Spark is what it claims to be: a systemd host with a GB10 persona that reaches the forge."""

import re


def test_systemd_is_running(host):
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), host.run("systemctl --failed --no-pager").stdout


def test_stand_in_gpu_reports_a_gb10(host):
    out = host.check_output("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader")
    assert out == "NVIDIA GB10, 12.1"


def test_stand_in_cuda_toolkit_is_13(host):
    assert "release 13.0" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_engine_repository_clones_at_a_release_tag(host):
    host.run("rm -rf /tmp/ds4-clone")
    clone = host.run("git clone -q --depth 1 --branch v0.6.5 git://forge/ds4.git /tmp/ds4-clone")
    assert clone.rc == 0, clone.stderr
    assert host.file("/tmp/ds4-clone/Makefile").exists
    tags = host.check_output("git ls-remote --tags git://forge/ds4.git")
    assert "refs/tags/v0.6.5.1" in tags


def test_weight_hub_answers_with_hub_metadata(host):
    url = (
        "http://forge:18080/antirez/deepseek-v4-gguf/resolve/main/"
        "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
    )
    headers = host.check_output(f"curl -sSI {url}").lower()
    assert headers.startswith("http/1.") and " 302" in headers.splitlines()[0]
    assert "x-repo-commit:" in headers and "x-linked-etag:" in headers


def test_release_feed_names_a_release(host):
    latest = host.check_output("curl -fsS http://forge:18080/Entrpi/ds4-on-spark/main/LATEST")
    assert re.fullmatch(r"v\d+(\.\d+){2,}\n?", latest), latest
