"""Tests of the STAND-IN hub and feed (hubstandin.py) and of its data (make_weights.py).

They hold the stand-in to the engine contract (docs/engine-contract.md in the shared docs) and to what
huggingface_hub 2.4 expects of a hub, so that the product's downloader, tested against the stand-in, is
tested against the real protocol.
"""

import ast
import hashlib
import http.client
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import gguf
import hubstandin
import make_weights
import pytest
import requests
from hubstandin import HubStandin

HERE = Path(__file__).resolve().parent
BASE = "antirez/deepseek-v4-gguf"
DRAFTER = "bleysg/DeepSeek-V4-Flash-DSpark-drafter-GGUF"
GATED = "ds4-standin/gated-gguf"
BASE_0731 = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
BASE_LEGACY = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
MTP_LEGACY = "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
# The engine contract's Q4 (ds4f-q4) file, which two Sparks serve as a pair.
Q4_0731 = (
    "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix-0731"
    ".gguf"
)
DRAFTER_0731 = "DSpark-drafter-Q2K-Q8-0731.gguf"
DRAFTER_LEGACY = "DSpark-drafter-Q2K-Q8.gguf"
# Upstream's DSpark support file (--dspark --mtp-model FILE), in the base repo.
SUPPORT_0731 = "DeepSeek-V4-Flash-DSpark-support-0731.gguf"
GATED_FILE = "ds4-standin-gated.gguf"
# The late-2026 families (engine contract, "The engine owners run in late 2026"), under their real names, in
# the repositories the shipped catalog names (guessed where the contract names none).
V41 = "antirez/deepseek-v4.1-flash-gguf"
GLM = "antirez/glm-5.3-flash-gguf"
QWEN = "antirez/qwen3.8-flash-next-gguf"
FAMILIES = {
    "DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf": (BASE, "base", "vision-exp"),
    "DeepSeek-V4-Flash-Vision-Encoder.gguf": (BASE, "vision", "vision-exp"),
    "DeepSeek-V4-Flash-Vision-Exp-DSpark-support.gguf": (BASE, "dspark_support", "vision-exp"),
    "DSpark-drafter-Q2K-Q8-vision-exp.gguf": (DRAFTER, "dspark", "vision-exp"),
    "DeepSeek-V4.1-Flash-Q2.gguf": (V41, "base", "v4.1"),
    "GLM-5.3-Flash-Q2.gguf": (GLM, "base", "glm-5.3"),
    "GLM-5.3-Flash-Vision-Encoder.gguf": (GLM, "vision", "glm-5.3"),
    "Qwen3.8-Flash-Next-Q2.gguf": (QWEN, "base", "qwen3.8"),
}
TOKEN = "hf_standin_token"
BENCH_REPO = "ds4-standin/bench"
BENCH_FILE = "bench-2MiB.bin"
BENCH_SIZE = 2 << 20


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("hubdata")
    return out, make_weights.build(out)


@pytest.fixture(scope="module")
def hub(data, tmp_path_factory):
    bench = tmp_path_factory.mktemp("bench") / BENCH_FILE
    bench.write_bytes(hashlib.shake_256(b"bench").digest(BENCH_SIZE))
    with HubStandin(data[0]) as standin:
        standin.add_file(BENCH_REPO, BENCH_FILE, bench)
        yield standin


@pytest.fixture(autouse=True)
def clean(request):
    yield
    if "hub" in request.fixturenames:
        standin = request.getfixturevalue("hub")
        standin.clear_faults()
        standin.set_feed(hubstandin.DEFAULT_FEED)


def described(data, repo, name):
    content = data[1]["repos"][repo]
    commit = content["refs"]["main"]
    return commit, content["commits"][commit]["files"][name]


def resolve_url(hub, repo, revision, name):
    return f"{hub.endpoint}/{repo}/resolve/{revision}/{name}"


def fetch(url, method="GET", headers=None, body=None):
    """One request, no redirect followed: (status, headers, the body as far as it came, complete)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        try:
            content, complete = resp.read(), True
        except http.client.IncompleteRead as exc:
            content, complete = exc.partial, False
        return resp.status, resp.headers, content, complete
    finally:
        conn.close()


def storage_url(hub, repo, name, revision="main", headers=None):
    status, hdrs, _, _ = fetch(resolve_url(hub, repo, revision, name), "HEAD", headers)
    assert status == 302
    return hdrs["Location"]


def blob(data, repo, name):
    return (data[0] / described(data, repo, name)[1]["blob"]).read_bytes()


# -- data ----------------------------------------------------------------------------------------------------


def test_make_weights_is_deterministic(data, tmp_path):
    # Another process, so that nothing per-process (hash seeds, object ids) can leak into the output.
    subprocess.run([sys.executable, str(HERE / "make_weights.py"), "--out", str(tmp_path)], check=True)
    first = {p.relative_to(data[0]): p.read_bytes() for p in sorted(data[0].rglob("*")) if p.is_file()}
    again = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert first == again
    assert Path("hub.json") in first


def test_data_has_the_contracts_names_and_real_gguf(data):
    out, doc = data
    files = {
        repo: set(content["commits"][content["refs"]["main"]]["files"])
        for repo, content in doc["repos"].items()
    }
    families = {}
    for name, (repo, _role, _generation) in FAMILIES.items():
        families.setdefault(repo, set()).add(name)
    assert files == {
        BASE: {BASE_0731, Q4_0731, BASE_LEGACY, MTP_LEGACY, SUPPORT_0731, *families[BASE]},
        DRAFTER: {DRAFTER_0731, DRAFTER_LEGACY, *families[DRAFTER]},
        GATED: {GATED_FILE},
        V41: families[V41],
        GLM: families[GLM],
        QWEN: families[QWEN],
    }
    assert [repo for repo, content in doc["repos"].items() if content["gated"]] == [GATED]
    assert doc["tokens"] == [TOKEN]
    expected = {
        BASE_0731: ("base", "0731"),
        BASE_LEGACY: ("base", "legacy"),
        MTP_LEGACY: ("mtp", "legacy"),
        DRAFTER_0731: ("dspark", "0731"),
        DRAFTER_LEGACY: ("dspark", "legacy"),
        SUPPORT_0731: ("dspark_support", "0731"),
        **{name: (role, generation) for name, (_repo, role, generation) in FAMILIES.items()},
    }
    sizes, hashes, roles = {}, [], {}
    for content in doc["repos"].values():
        commit = content["refs"]["main"]
        assert re.fullmatch(r"[0-9a-f]{40}", commit)
        for name, f in content["commits"][commit]["files"].items():
            raw = (out / f["blob"]).read_bytes()
            assert (len(raw), hashlib.sha256(raw).hexdigest()) == (f["size"], f["sha256"])
            sizes[name] = f["size"]
            hashes.append(f["sha256"])
            roles[name] = f["role"]
            reader = gguf.GGUFReader(out / f["blob"])
            fields = {key: field.contents() for key, field in reader.fields.items()}
            assert fields["general.architecture"] == "deepseek4"
            assert fields["general.name"]
            assert fields["tokenizer.ggml.model"] == "gpt2"
            assert "Paris" in fields["tokenizer.ggml.tokens"]
            if name in expected:
                assert (fields["ds4standin.role"], fields["ds4standin.generation"]) == expected[name]
    # Every base is larger than any other file, by far: resume tests have something to cut.
    bases = [name for name, role in roles.items() if role == "base" and name != GATED_FILE]
    smaller = max(size for name, size in sizes.items() if name not in bases)
    assert min(sizes[name] for name in bases) > 4 * smaller
    assert sizes[Q4_0731] > sizes[BASE_0731]
    # Distinct sizes among the bases, and distinct content everywhere: a mix-up cannot pass unnoticed.
    assert len({sizes[name] for name in bases}) == len(bases)
    assert len(set(hashes)) == len(hashes) == 16


def test_server_imports_only_the_standard_library():
    tree = ast.parse((HERE / "hubstandin.py").read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules - {"__future__"} <= sys.stdlib_module_names


# -- the hub's protocol ------------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", ["main", "commit"])
def test_head_answers_the_hubs_metadata_and_redirects_to_the_other_port(hub, data, revision):
    commit, f = described(data, BASE, BASE_0731)
    status, headers, body, _ = fetch(
        resolve_url(hub, BASE, commit if revision == "commit" else revision, BASE_0731), "HEAD"
    )
    assert status == 302
    assert headers["X-Repo-Commit"] == commit
    assert headers["X-Linked-Size"] == str(f["size"])
    assert headers["X-Linked-Etag"] == headers["ETag"] == f'"{f["sha256"]}"'
    assert headers["Content-Length"] == "0"
    location = urllib.parse.urlsplit(headers["Location"])
    assert (location.hostname, location.port) == ("127.0.0.1", hub.storage_port)
    assert hub.storage_port != hub.port
    assert location.path == f"/_storage/{f['sha256']}"


def test_redirect_keeps_the_host_name_the_client_used(hub):
    status, headers, _, _ = fetch(
        resolve_url(hub, BASE, "main", BASE_0731), "GET", {"Host": f"forge:{hub.port}"}
    )
    assert status == 302
    assert headers["Location"].startswith(f"http://forge:{hub.storage_port}/_storage/")


def test_get_through_the_redirect_serves_the_file(hub, data):
    _, f = described(data, BASE, BASE_LEGACY)
    resp = requests.get(resolve_url(hub, BASE, "main", BASE_LEGACY), timeout=10)
    assert resp.status_code == 200
    assert [r.status_code for r in resp.history] == [302]
    assert hashlib.sha256(resp.content).hexdigest() == f["sha256"]
    assert resp.headers["Content-Length"] == str(f["size"])
    assert resp.headers["ETag"] == f'"{f["sha256"]}"'
    assert resp.headers["Accept-Ranges"] == "bytes"
    assert BASE_LEGACY in resp.headers["Content-Disposition"]
    head = requests.head(resp.url, timeout=10)
    assert (head.status_code, head.headers["Content-Length"], head.content) == (200, str(f["size"]), b"")


def test_storage_honours_ranges(hub, data):
    content = blob(data, BASE, BASE_0731)
    size = len(content)
    url = storage_url(hub, BASE, BASE_0731)
    cases = {
        "bytes=1000-": (1000, size - 1),
        "bytes=10-19": (10, 19),
        f"bytes={size - 5}-{size + 100}": (size - 5, size - 1),
        "bytes=-7": (size - 7, size - 1),
    }
    for spec, (first, last) in cases.items():
        status, headers, body, complete = fetch(url, headers={"Range": spec})
        assert (status, complete) == (206, True), spec
        assert headers["Content-Range"] == f"bytes {first}-{last}/{size}", spec
        assert body == content[first : last + 1], spec
    for spec in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}"):
        status, headers, body, _ = fetch(url, headers={"Range": spec})
        assert (status, headers["Content-Range"], body) == (416, f"bytes */{size}", b""), spec
    status, _, body, _ = fetch(url, headers={"Range": "bytes=0-1,5-6"})
    assert (status, body) == (200, content)


@pytest.mark.parametrize(
    ("repo", "revision", "name", "code"),
    [
        ("nobody/nothing", "main", BASE_0731, "RepoNotFound"),
        (BASE, "no-such-branch", BASE_0731, "RevisionNotFound"),
        (BASE, "0" * 40, BASE_0731, "RevisionNotFound"),
        (BASE, "main", "missing.gguf", "EntryNotFound"),
        (DRAFTER, "main", BASE_0731, "EntryNotFound"),
    ],
)
def test_unknown_things_are_404_with_the_hubs_error_code(hub, repo, revision, name, code):
    status, headers, body, _ = fetch(resolve_url(hub, repo, revision, name))
    assert (status, headers["X-Error-Code"]) == (404, code)
    assert json.loads(body)["error"] == headers["X-Error-Message"]
    assert ("X-Repo-Commit" in headers) == (code == "EntryNotFound")


def test_unknown_storage_object_is_404(hub):
    assert fetch(f"{hub.storage_endpoint}/_storage/{'0' * 64}")[0] == 404


def test_gated_repo_wants_a_listed_token(hub, data):
    url = resolve_url(hub, GATED, "main", GATED_FILE)
    status, headers, _, _ = fetch(url, "HEAD")
    assert (status, headers["X-Error-Code"]) == (401, "GatedRepo")
    status, headers, _, _ = fetch(url, "HEAD", {"Authorization": "Bearer hf_wrong"})
    assert (status, headers["X-Error-Code"]) == (403, "GatedRepo")
    status, headers, _, _ = fetch(url, "HEAD", {"Authorization": f"Bearer {TOKEN}"})
    assert (status, headers["X-Repo-Commit"]) == (302, described(data, GATED, GATED_FILE)[0])


# -- faults --------------------------------------------------------------------------------------------------


def test_cut_ends_the_body_after_n_bytes_and_a_range_resumes(hub, data):
    content = blob(data, BASE, BASE_0731)
    url = storage_url(hub, BASE, BASE_0731)
    hub.set_fault(BASE_0731, cut_after=100_000)
    status, headers, body, complete = fetch(url)
    assert (status, headers["Content-Length"], len(body), complete) == (
        200,
        str(len(content)),
        100_000,
        False,
    )
    assert body == content[:100_000]
    status, _, rest, complete = fetch(url, headers={"Range": f"bytes={len(body)}-"})
    assert (status, complete) == (206, True)
    assert body + rest == content


def test_cut_counts_the_bytes_of_this_response(hub, data):
    content = blob(data, BASE, BASE_0731)
    hub.set_fault(BASE_0731, cut_after=10)
    status, _, body, complete = fetch(storage_url(hub, BASE, BASE_0731), headers={"Range": "bytes=5000-"})
    assert (status, body, complete) == (206, content[5000:5010], False)


def test_flip_changes_one_byte_at_its_file_offset(hub, data):
    content = blob(data, BASE, BASE_LEGACY)
    url = storage_url(hub, BASE, BASE_LEGACY)
    hub.set_fault(BASE_LEGACY, flip_offset=4242, times=2)
    _, _, body, complete = fetch(url)
    assert complete and len(body) == len(content)
    assert [i for i in range(len(body)) if body[i] != content[i]] == [4242]
    assert body[4242] == content[4242] ^ 0xFF
    _, _, part, _ = fetch(url, headers={"Range": "bytes=4000-4999"})
    assert part[242] == content[4242] ^ 0xFF and part[:242] == content[4000:4242]
    assert fetch(url)[2] == content  # the two GETs are spent


def test_a_flip_is_spent_only_by_the_answers_that_carry_its_byte(hub, data):
    """Connections ask for their ranges in no fixed order: a range without the byte leaves the flip for
    the range that holds it."""
    content = blob(data, BASE, BASE_LEGACY)
    url = storage_url(hub, BASE, BASE_LEGACY)
    hub.set_fault(BASE_LEGACY, flip_offset=4242)
    assert fetch(url, headers={"Range": "bytes=0-999"})[2] == content[:1000]
    part = fetch(url, headers={"Range": "bytes=4000-4999"})[2]
    assert part[242] == content[4242] ^ 0xFF
    assert fetch(url)[2] == content  # spent by the one answer that carried it


def test_throttle_never_sends_faster_than_the_target_rate(hub):
    # A bound that holds on any machine: each chunk leaves only when its last byte is due. How close a
    # throttled transfer comes to the rate on a given machine is bench/fetch_throughput.py's to measure.
    rate = 8 << 20
    url = storage_url(hub, BENCH_REPO, BENCH_FILE)
    hub.set_fault(BENCH_FILE, throttle_bps=rate)
    started = time.monotonic()
    _, _, body, complete = fetch(url)
    elapsed = time.monotonic() - started
    assert complete and len(body) == BENCH_SIZE
    assert elapsed >= BENCH_SIZE / rate


def test_status_fault_answers_for_times_gets_and_heads_do_not_count(hub, data):
    url = storage_url(hub, DRAFTER, DRAFTER_0731)
    hub.set_fault(DRAFTER_0731, status=503, times=2)
    assert fetch(url, "HEAD")[0] == 200
    for _ in range(2):
        status, headers, _, _ = fetch(url)
        assert (status, headers["Retry-After"]) == (503, "1")
    assert fetch(url)[2] == blob(data, DRAFTER, DRAFTER_0731)


def test_fault_without_times_lasts_until_cleared(hub):
    url = storage_url(hub, DRAFTER, DRAFTER_LEGACY)
    hub.set_fault(DRAFTER_LEGACY, status=429, times=None)
    assert [fetch(url)[0] for _ in range(3)] == [429, 429, 429]
    hub.clear_faults()
    assert fetch(url)[0] == 200


def test_set_fault_refuses_what_it_cannot_do(hub):
    for kwargs in (
        {"file": "nope.gguf", "status": 500},
        {"file": BASE_0731},
        {"file": BASE_0731, "status": 302},
    ):
        with pytest.raises(ValueError):
            hub.set_fault(**kwargs)
    with pytest.raises(ValueError):
        hub.set_fault(BASE_0731, throttle_bps=0)


def test_faults_over_http(hub, data):
    control = f"{hub.endpoint}/_standin/faults"
    spec = {"file": MTP_LEGACY, "status": 500, "times": None}
    status, _, body, _ = fetch(control, "POST", {"Content-Type": "application/json"}, json.dumps(spec))
    assert status == 200
    assert json.loads(body)["faults"][MTP_LEGACY]["status"] == 500
    url = storage_url(hub, BASE, MTP_LEGACY)
    assert [fetch(url)[0] for _ in range(2)] == [500, 500]
    assert json.loads(fetch(control)[2])["faults"][MTP_LEGACY]["times"] is None
    assert fetch(control, "DELETE")[0] == 200
    assert fetch(url)[2] == blob(data, BASE, MTP_LEGACY)
    assert fetch(control, "POST", body=json.dumps({"file": "nope", "status": 500}))[0] == 400
    assert fetch(control, "POST", body=json.dumps({"file": MTP_LEGACY, "bogus": 1}))[0] == 400
    assert fetch(control, "POST", body="not json")[0] == 400


def _until(condition, what, seconds=30):
    """Wait for a condition of the stand-in's own state (bounded: a hang guard, not a timing)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_hold_stops_the_body_after_n_bytes_until_it_is_released(hub, data):
    content = blob(data, BASE, BASE_0731)
    parts = urllib.parse.urlsplit(storage_url(hub, BASE, BASE_0731))
    hub.set_fault(BASE_0731, hold_after=1000)
    assert hub.holds() == {BASE_0731: {"released": False, "waiting": 0, "held": 0}}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", parts.path)
        resp = conn.getresponse()
        assert resp.read(1000) == content[:1000]
        _until(lambda: hub.holds()[BASE_0731]["waiting"] == 1, "the GET waits on the hold")
        control = f"{hub.endpoint}/_standin/holds"
        assert json.loads(fetch(control)[2])["holds"][BASE_0731]["waiting"] == 1
        assert fetch(f"{control}/release", "POST", body=json.dumps({"file": "other"}))[0] == 400
        assert fetch(f"{control}/release", "POST", body=json.dumps({"file": BASE_0731}))[0] == 200
        assert resp.read() == content[1000:]
    finally:
        conn.close()
    assert hub.holds()[BASE_0731] == {"released": True, "waiting": 0, "held": 1}
    assert fetch(storage_url(hub, BASE, BASE_0731))[2] == content  # the fault was spent


def test_a_released_hold_lets_later_transfers_through_and_clearing_the_faults_releases(hub, data):
    content = blob(data, BASE, BASE_0731)
    url = storage_url(hub, BASE, BASE_0731)
    hub.set_fault(BASE_0731, hold_after=10, times=None)
    hub.release(BASE_0731)
    assert fetch(url)[2] == content  # it reached the hold after the release: no wait
    hub.set_fault(BASE_0731, hold_after=10, times=None)
    result = {}
    reader = threading.Thread(target=lambda: result.update(r=fetch(url)))
    reader.start()
    _until(lambda: hub.holds()[BASE_0731]["waiting"] == 1, "the GET waits on the hold")
    hub.clear_faults()
    reader.join(30)
    assert not reader.is_alive() and result["r"][2] == content


def test_stop_ends_a_held_transfer(data):
    standin = HubStandin(data[0]).start()
    url = storage_url(standin, BASE, BASE_0731)
    standin.set_fault(BASE_0731, hold_after=10)
    result = {}
    reader = threading.Thread(target=lambda: result.update(r=fetch(url)))
    reader.start()
    _until(lambda: standin.holds()[BASE_0731]["waiting"] == 1, "the GET waits on the hold")
    standin.stop()
    reader.join(30)
    assert not reader.is_alive() and result["r"][3] is False


def test_stop_ends_a_transfer_in_flight(data):
    standin = HubStandin(data[0]).start()
    parts = urllib.parse.urlsplit(storage_url(standin, BASE, BASE_0731))
    standin.set_fault(BASE_0731, throttle_bps=20_000)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", parts.path)
        resp = conn.getresponse()  # the headers are in: the throttled body is in flight
        standin.stop()
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        conn.close()


# -- the feed ------------------------------------------------------------------------------------------------


def test_feed_defaults_to_the_newest_release_and_can_be_set(hub):
    feed = f"{hub.endpoint}/Entrpi/ds4-on-spark/main/LATEST"
    status, headers, body, _ = fetch(feed)
    assert (status, body) == (200, b"v0.6.5\n")
    assert headers["Content-Type"].startswith("text/plain")
    hub.set_feed("v0.6.6\n")
    assert fetch(feed)[2] == b"v0.6.6\n"
    html = b"<!DOCTYPE html><html><body>captive portal</body></html>"
    assert fetch(f"{hub.endpoint}/_standin/feed", "PUT", body=html)[0] == 200
    assert fetch(feed)[2] == html
    huge = b"v" * (8 << 20)
    hub.set_feed(huge)
    assert fetch(feed)[2] == huge
    hub.set_feed(b"\x00\xff garbage")
    assert fetch(feed)[2] == b"\x00\xff garbage"


def test_feed_takes_faults_under_the_name_latest(hub):
    feed = f"{hub.endpoint}/Entrpi/ds4-on-spark/main/LATEST"
    hub.set_fault("LATEST", status=500)
    assert fetch(feed)[0] == 500
    hub.set_fault("LATEST", throttle_bps=2)
    started = time.monotonic()
    assert fetch(feed)[2] == b"v0.6.5\n"
    assert time.monotonic() - started > 3  # longer than the engine's 3 s timeout on the feed


def test_other_paths_are_404(hub):
    assert fetch(f"{hub.endpoint}/Entrpi/ds4-on-spark/main/OTHER")[0] == 404
    assert fetch(f"{hub.endpoint}/antirez/deepseek-v4-gguf/blob/main/x")[0] == 404


# -- huggingface_hub against the stand-in -------------------------------------------------------------------


def test_hf_hub_download_at_a_pinned_revision(hub, data, tmp_path):
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    commit, f = described(data, BASE, BASE_0731)
    meta = get_hf_file_metadata(
        hf_hub_url(BASE, BASE_0731, revision=commit, endpoint=hub.endpoint), token=False
    )
    assert (meta.commit_hash, meta.etag, meta.size) == (commit, f["sha256"], f["size"])
    path = hf_hub_download(
        BASE, BASE_0731, revision=commit, endpoint=hub.endpoint, cache_dir=tmp_path, token=False
    )
    assert f"/snapshots/{commit}/" in path
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == f["sha256"]


def test_hf_hub_download_resumes_after_a_cut(hub, data, tmp_path):
    from huggingface_hub import hf_hub_download

    hub.set_fault(BASE_0731, cut_after=100_000)
    path = hf_hub_download(BASE, BASE_0731, endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    assert (
        hashlib.sha256(Path(path).read_bytes()).hexdigest() == described(data, BASE, BASE_0731)[1]["sha256"]
    )
    assert hub.faults() == {}


def test_hf_hub_download_of_a_gated_file_needs_the_token(hub, data, tmp_path):
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError

    with pytest.raises(GatedRepoError):
        hf_hub_download(GATED, GATED_FILE, endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    path = hf_hub_download(GATED, GATED_FILE, endpoint=hub.endpoint, cache_dir=tmp_path, token=TOKEN)
    assert (
        hashlib.sha256(Path(path).read_bytes()).hexdigest() == described(data, GATED, GATED_FILE)[1]["sha256"]
    )


# -- the command line ----------------------------------------------------------------------------------------


def test_cli_serves_with_a_plain_python_and_stops_on_sigterm(data):
    # /usr/bin/python3 -I: no venv, no user site, as in the sandbox's Debian container.
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    cmd = [
        python,
        "-I",
        str(HERE / "hubstandin.py"),
        "--data",
        str(data[0]),
        "--port",
        "0",
        "--storage-port",
        "0",
    ]
    proc = subprocess.Popen([*cmd, "--feed", "v9.9.9\n"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        endpoint = re.search(r"hub (http://\S+),", line).group(1)
        assert fetch(f"{endpoint}/Entrpi/ds4-on-spark/main/LATEST")[2] == b"v9.9.9\n"
        assert fetch(f"{endpoint}/{BASE}/resolve/main/{BASE_0731}", "HEAD")[0] == 302
        proc.terminate()
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()
        proc.wait()


# -- the network to the hub ----------------------------------------------------------------------------------


def _fetch_all(urls):
    """Fetch the URLs at once, one connection each; the seconds each took until its body was complete."""
    results = [None] * len(urls)

    def one(i, url):
        started = time.monotonic()
        results[i] = (fetch(url), time.monotonic() - started)

    threads = [threading.Thread(target=one, args=(i, u)) for i, u in enumerate(urls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r[3] and len(r[2]) == BENCH_SIZE for r, _ in results)
    return [elapsed for _, elapsed in results]


@pytest.fixture
def network(hub):
    yield hub
    hub.set_network()


# Bounds that hold on any machine: the stand-in never sends faster than its caps. How close it comes to
# them, and that connections add up below the link, is bench/fetch_throughput.py's to measure.


def test_each_connection_is_held_to_its_cap_however_many_there_are(network):
    conn = 4 << 20
    network.set_network(conn_bps=conn)
    url = storage_url(network, BENCH_REPO, BENCH_FILE)
    for count in (1, 2, 4):
        assert min(_fetch_all([url] * count)) >= BENCH_SIZE / conn


def test_the_link_is_shared_by_all_connections(network):
    link = 8 << 20
    # Each connection alone could fill the link: four together take at least four bodies' time on it.
    network.set_network(conn_bps=link, link_bps=link)
    url = storage_url(network, BENCH_REPO, BENCH_FILE)
    # From the first request to the last byte: a connection that started late may take less than that on
    # its own clock, while the link was already busy with the others.
    started = time.monotonic()
    _fetch_all([url] * 4)
    assert time.monotonic() - started >= 4 * BENCH_SIZE / link


def test_each_answer_waits_a_round_trip_and_a_new_connection_one_more(network):
    url = storage_url(network, BENCH_REPO, BENCH_FILE)
    rtt = 0.2
    network.set_network(rtt_ms=rtt * 1000)
    started = time.monotonic()
    fetch(url, "HEAD")  # a new connection: handshake and request
    assert time.monotonic() - started >= 2 * rtt
    with requests.Session() as session:
        session.head(url)
        started = time.monotonic()
        session.head(url)  # the same connection
        assert time.monotonic() - started >= rtt


def test_the_network_is_set_over_http_and_refuses_nonsense(network):
    control = f"{network.endpoint}/_standin/network"
    spec = {"conn_bps": 1000, "link_bps": 8000, "rtt_ms": 5}
    assert fetch(control, "PUT", {"Content-Type": "application/json"}, json.dumps(spec))[0] == 200
    assert json.loads(fetch(control)[2]) == spec
    assert fetch(control, "PUT", body=json.dumps({"conn_bps": -1}))[0] == 400
    assert fetch(control, "PUT", body=json.dumps({"bogus": 1}))[0] == 400
    network.set_network()
    assert json.loads(fetch(control)[2]) == {"conn_bps": None, "link_bps": None, "rtt_ms": 0}


def test_a_server_without_ranges_and_a_replaced_file_are_faults(hub, data):
    url = storage_url(hub, BASE, BASE_0731)
    content = blob(data, BASE, BASE_0731)
    hub.set_fault(BASE_0731, ignore_range=True)
    status, headers, body, _ = fetch(url, headers={"Range": "bytes=10-19"})
    assert (status, body, "Content-Range" in headers) == (200, content, False)
    hub.set_fault(BASE_0731, etag="something-else")
    status, headers, body, _ = fetch(url, headers={"Range": "bytes=10-19"})
    assert (status, headers["ETag"], body) == (206, '"something-else"', content[10:20])
    assert fetch(url, "HEAD")[1]["ETag"] != '"something-else"'
    for bad in ({"ignore_range": 1}, {"etag": ""}, {"etag": 'a"b'}):
        with pytest.raises(ValueError):
            hub.set_fault(BASE_0731, **bad)


def test_stats_count_the_content_bytes_sent(hub):
    url = storage_url(hub, BENCH_REPO, BENCH_FILE)
    stats = f"{hub.endpoint}/_standin/stats"
    before = json.loads(fetch(stats)[2])["content_bytes"]
    fetch(url, headers={"Range": "bytes=0-999"})
    fetch(url, "HEAD")
    hub.set_fault(BENCH_FILE, throttle_bps=BENCH_SIZE * 8)
    fetch(url)
    assert json.loads(fetch(stats)[2])["content_bytes"] - before == 1000 + BENCH_SIZE


@pytest.mark.parametrize("throttled", [False, True], ids=["sendfile", "paced"])
def test_an_answer_is_counted_before_its_client_can_have_read_it(hub, monkeypatch, throttled):
    # The stand-in's own counting made slow, so that a count made only after the last byte left would be
    # read too early: a client that has the whole body must find it counted at once.
    count = hub.count
    monkeypatch.setattr(hub, "count", lambda sent: (time.sleep(0.3), count(sent)))
    url = storage_url(hub, BENCH_REPO, BENCH_FILE)
    stats = f"{hub.endpoint}/_standin/stats"
    if throttled:
        hub.set_fault(BENCH_FILE, throttle_bps=BENCH_SIZE * 8)
    before = json.loads(fetch(stats)[2])["content_bytes"]
    assert fetch(url)[3]
    assert json.loads(fetch(stats)[2])["content_bytes"] - before == BENCH_SIZE
