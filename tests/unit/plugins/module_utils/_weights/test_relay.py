"""Peer distribution: a Spark serving its verified copies (module_utils/_weights/relay.py) and the hub client
fetching from peers before the hub, verifying the same sha256."""

import hashlib
import json
import os
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from ansible_collections.ds4.fleet.plugins.filter.ds4_peers import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import user_name
from ansible_collections.ds4.fleet.plugins.module_utils._weights import hub as ds4_hub
from ansible_collections.ds4.fleet.plugins.module_utils._weights import relay as ds4_peer
from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import PartState
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import PeerServer, peer_url, plan

BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
PIECE = 16 << 10


def hub_file(hub, hub_files, dest, **kw):
    kw.setdefault("retry_delay", 0.01)
    kw.setdefault("piece", PIECE)
    kw.setdefault("connections", 4)
    return HubFile(FileRef(hub.endpoint, hub_files[BASE]["repo"], "main", BASE), str(dest), **kw)


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def seed(hub, hub_files, tmp_path):
    """A Spark's weights directory with a verified copy of the base file, fetched from the hub."""
    directory = tmp_path / "seed"
    directory.mkdir()
    hub_file(hub, hub_files, directory).ensure()
    return directory


def serving(directory, allowed=("127.0.0.1",), rate_bps=None):
    return PeerServer(str(directory), "127.0.0.1", 0, allowed, rate_bps)


def served_once_settled(server, timeout=10):
    """What the server counted as served, read once the count stops moving: a handler adds its bytes just
    after its last write, so a client may hold the whole file a moment before the count says so."""
    deadline = time.monotonic() + timeout
    last = server.served
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = server.served
        if now == last:
            return now
        last = now
    return last


def fetch_from_seed(hub, hub_files, seed, tmp_path):
    """BASE fetched into tmp_path/peer with the seed's peer server as its one peer, which served it once:
    (the folder, the peer's URL, the fetch's result)."""
    dest = tmp_path / "peer"
    dest.mkdir()
    with serving(seed) as server:
        url = peer_url("127.0.0.1", server.port)
        result = hub_file(hub, hub_files, dest, peers=[url]).ensure()
        assert served_once_settled(server) == {BASE: hub_files[BASE]["size"]}
    return dest, url, result


def test_a_peer_hands_over_its_verified_copy_and_the_hub_sends_no_byte(hub, hub_files, seed, tmp_path):
    want = hub_files[BASE]
    dest, url, result = fetch_from_seed(hub, hub_files, seed, tmp_path)
    assert (result["action"], result["source"], result["bytes_from"]) == ("fetched", url, {url: want["size"]})
    assert sha256_of(dest / BASE) == want["sha256"]
    assert json.loads((dest / f".{BASE}.verified.json").read_text())["sha256"] == want["sha256"]


def test_a_verified_copy_is_served_with_sendfile_never_through_a_buffer_of_the_server(
    hub, hub_files, seed, tmp_path, monkeypatch
):
    """Issue 56: between Sparks the relay is bound by its program, not the 200 GbE link: the kernel moves
    the file's pages to the socket (os.sendfile), the server never reads them."""
    want = hub_files[BASE]
    sent, copied = [], []
    real_sendfile, real_send = os.sendfile, socket.socket._sendfile_use_send

    def counted(out_fd, in_fd, offset, count, *args, **kwargs):
        n = real_sendfile(out_fd, in_fd, offset, count, *args, **kwargs)
        sent.append(n)
        return n

    def through_a_buffer(self, *args, **kwargs):
        copied.append(1)
        return real_send(self, *args, **kwargs)

    monkeypatch.setattr(os, "sendfile", counted)
    monkeypatch.setattr(socket.socket, "_sendfile_use_send", through_a_buffer)
    dest, url, result = fetch_from_seed(hub, hub_files, seed, tmp_path)
    assert result["bytes_from"] == {url: want["size"]}
    assert sha256_of(dest / BASE) == want["sha256"]
    assert not copied, "a body sent through the server's own buffer"
    assert sum(sent) == want["size"]


def test_a_peer_is_reached_directly_while_the_hub_goes_through_the_sites_proxy(
    hub, hub_files, seed, tmp_path, monkeypatch
):
    # ds4_proxy_env puts the proxy in the fetch's environment; a peer on the LAN must not go through it.
    # The "proxy" is a closed port: whatever is sent there fails. The hub (127.0.0.1) is exempt.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "all_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    want = hub_files[BASE]
    dest = tmp_path / "peer"
    dest.mkdir()
    with PeerServer(str(seed), "127.0.0.2", 0, ("127.0.0.1",), None) as server:
        url = peer_url("127.0.0.2", server.port)
        result = hub_file(hub, hub_files, dest, peers=[url]).ensure()
    assert (result["source"], result["bytes_from"], result["warnings"]) == (url, {url: want["size"]}, [])
    assert sha256_of(dest / BASE) == want["sha256"]


def test_a_peer_with_a_corrupt_copy_is_caught_and_the_file_comes_from_the_hub(hub, hub_files, seed, tmp_path):
    want = hub_files[BASE]
    # A lying peer: its file has a flipped byte, its record claims the right sha256 for it.
    data = bytearray((seed / BASE).read_bytes())
    data[PIECE * 3 + 5] ^= 0xFF
    (seed / BASE).write_bytes(data)
    st = (seed / BASE).stat()
    record = json.loads((seed / f".{BASE}.verified.json").read_text())
    record.update(size=st.st_size, mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev)
    (seed / f".{BASE}.verified.json").write_text(json.dumps(record))
    dest = tmp_path / "peer"
    dest.mkdir()
    with serving(seed) as server:
        url = peer_url("127.0.0.1", server.port)
        result = hub_file(hub, hub_files, dest, peers=[url]).ensure()
    assert result["source"] == "hub" and result["bytes_from"] == {url: want["size"], "hub": want["size"]}
    assert any(f"from the peer {url} had sha256" in w for w in result["warnings"])
    assert sha256_of(dest / BASE) == want["sha256"]


def test_a_peer_that_dies_costs_a_retry_from_the_next_source_and_its_ranges_are_kept(
    hub, hub_files, seed, tmp_path, monkeypatch
):
    want = hub_files[BASE]
    dest = tmp_path / "peer"
    dest.mkdir()
    # The peer sends four pieces, then nothing until it is stopped: its death is arranged, not timed.
    # (Its rate cap writes a piece at a time; each write waits for the cap's clock, so the hold goes there.)
    gate, reserved, real_wait = threading.Event(), [], ds4_peer._Rate.wait

    def wait(rate, n):
        if sum(reserved) >= 4 * PIECE:
            gate.wait()
        reserved.append(n)
        real_wait(rate, n)

    monkeypatch.setattr(ds4_peer._Rate, "wait", wait)
    server = serving(seed, rate_bps=50 * PIECE).start()
    url = peer_url("127.0.0.1", server.port)
    fetch = hub_file(hub, hub_files, dest, peers=[url, "http://127.0.0.1:1"])
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(fetch.ensure()))
    worker.start()
    try:
        deadline = time.monotonic() + 60  # a hang guard
        while PartState.load(str(dest), BASE, want["size"], want["sha256"]).bytes_done < 4 * PIECE:
            if not worker.is_alive():
                break
            assert time.monotonic() < deadline, "the peer never gave four ranges"
            time.sleep(0.02)
    finally:
        server.stop()
        gate.set()
        worker.join()
    assert outcome["source"] == "hub" and outcome["bytes_from"][url] == 4 * PIECE
    assert outcome["bytes_from"]["hub"] == want["size"] - 4 * PIECE, "the peer's complete ranges were kept"
    assert (
        sum("trying the next source" in w for w in outcome["warnings"]) == 2
    )  # the dead peer, the closed port
    assert sha256_of(dest / BASE) == want["sha256"]


def test_a_client_that_is_not_a_peer_is_refused_before_it_is_heard(hub, hub_files, seed, tmp_path):
    dest = tmp_path / "peer"
    dest.mkdir()
    with serving(seed, allowed=("127.0.0.2",)) as server:
        url = peer_url("127.0.0.1", server.port)
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{url}/{BASE}", timeout=30)
        result = hub_file(hub, hub_files, dest, peers=[url]).ensure()
        assert server.served == {} and set(server.refused) == {"127.0.0.1"}
    assert result["source"] == "hub" and sha256_of(dest / BASE) == hub_files[BASE]["sha256"]


def test_only_verified_files_are_served_and_nothing_else(seed):
    shutil.copy(seed / BASE, seed / "unverified.gguf")
    (seed / "secret").write_text("not a weight")
    with serving(seed) as server:
        url = peer_url("127.0.0.1", server.port)
        for path in ("unverified.gguf", "secret", f".{BASE}.verified.json", "..%2Fetc%2Fpasswd", ""):
            assert requests.get(f"{url}/{path}", timeout=30).status_code == 404, path
        assert requests.put(f"{url}/{BASE}", data=b"x", timeout=30).status_code == 501
        ranged = requests.get(f"{url}/{BASE}", headers={"Range": "bytes=10-19"}, timeout=30)
        assert (ranged.status_code, ranged.content) == (206, (seed / BASE).read_bytes()[10:20])


def test_one_server_listens_on_each_address_a_spark_is_reached_on_counting_and_capping_them_together(seed):
    """A pair's member that serves its other member on the link and a single Spark on the LAN listens on
    both addresses, on one port, its rate cap and what it served shared by both (127.0.0.2 plays the link's:
    all of 127/8 is this host's)."""
    content = (seed / BASE).read_bytes()
    with PeerServer(str(seed), ["127.0.0.1", "127.0.0.2"], 0, ["127.0.0.1"], len(content)) as server:
        started = time.monotonic()
        for address in ("127.0.0.1", "127.0.0.2"):
            url = f"{peer_url(address, server.port)}/{BASE}"
            assert requests.get(url, timeout=60).content == content
        assert time.monotonic() - started >= 2, "the cap holds for both addresses together"
        assert served_once_settled(server) == {BASE: 2 * len(content)}
    assert _refused(server.port)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.2", server.port)) != 0


def _refused(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_port_is_closed_after_the_run_and_after_a_failed_run(seed, tmp_path):
    with serving(seed) as server:
        port = server.port
        assert not _refused(port)
    assert _refused(port)
    with pytest.raises(RuntimeError), serving(seed) as server:
        port = server.port
        raise RuntimeError("the run failed")
    assert _refused(port)
    # The module's way: until a stop file appears (or a deadline passes), then closed.
    server = serving(seed).start()
    stop_file = tmp_path / "stop"
    worker = threading.Thread(target=server.serve_until, args=(time.monotonic() + 60, str(stop_file)))
    worker.start()
    assert not _refused(server.port)
    stop_file.touch()
    worker.join(timeout=60)  # a hang guard: it looks for the file five times a second
    assert not worker.is_alive() and _refused(server.port)


def test_the_rate_cap_holds_for_all_connections_together(seed):
    # A bound that holds on any machine: two connections share the cap, so two halves take as long as the
    # whole file at the cap (a cap per connection would take half that). How close to the cap the server
    # comes is for bench/ to measure.
    content = (seed / BASE).read_bytes()
    size = len(content)
    rate = size
    with serving(seed, rate_bps=rate) as server:
        url = f"{peer_url('127.0.0.1', server.port)}/{BASE}"
        half = size // 2
        bodies = {}

        def get(first, header):
            bodies[first] = requests.get(url, headers={"Range": header}, timeout=60).content

        started = time.monotonic()
        threads = [
            threading.Thread(target=get, args=(first, header))
            for first, header in ((0, f"bytes=0-{half - 1}"), (half, f"bytes={half}-"))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert time.monotonic() - started >= size / rate
    assert bodies[0] + bodies[half] == content
    assert os.path.exists(seed / BASE)


# -- who fetches what from where ---------------------------------------------------------------------------


def hosts(*specs):
    return [
        {"name": f"spark0{i + 1}", "address": f"10.0.0.{i + 1}", "wanted": ["a", "b"], "fetch": list(fetch)}
        for i, fetch in enumerate(specs)
    ]


def test_a_file_nobody_has_crosses_the_hub_once_and_the_seed_serves_the_others():
    result = plan(hosts("ab", "ab", "ab"), 18090)
    spark = result["hosts"]
    assert spark["spark01"]["first"] == ["a", "b"] and spark["spark01"]["peers"] == {}
    assert spark["spark01"]["serve_to"] == ["10.0.0.2", "10.0.0.3"] and spark["spark01"]["serves"] == [
        "a",
        "b",
    ]
    for other in ("spark02", "spark03"):
        assert spark[other]["first"] == [] and spark[other]["serve_to"] == []
        assert spark[other]["peers"] == {"a": ["http://10.0.0.1:18090"], "b": ["http://10.0.0.1:18090"]}
    assert "spark01 seeds a from the hub for spark02, spark03" in result["lines"]


def test_files_some_spark_has_come_from_the_holders_spread_over_them():
    spark = plan(hosts("", "", "ab", "ab"), 18090)["hosts"]
    assert spark["spark03"]["peers"]["a"] == ["http://10.0.0.1:18090", "http://10.0.0.2:18090"]
    assert spark["spark04"]["peers"]["a"] == ["http://10.0.0.2:18090", "http://10.0.0.1:18090"]
    assert spark["spark01"]["serve_to"] == spark["spark02"]["serve_to"] == ["10.0.0.3", "10.0.0.4"]
    assert spark["spark03"]["serve_to"] == [] and spark["spark03"]["first"] == []


def test_only_some_sparks_need_a_file():
    spark = plan(hosts("a", "", "b"), 18090)["hosts"]
    assert spark["spark01"]["peers"] == {"a": ["http://10.0.0.2:18090", "http://10.0.0.3:18090"]}
    assert spark["spark01"]["first"] == ["b"]
    assert spark["spark03"]["peers"] == {"b": ["http://10.0.0.1:18090", "http://10.0.0.2:18090"]}
    assert spark["spark02"]["serve_to"] == ["10.0.0.1", "10.0.0.3"]


@pytest.mark.parametrize("relay", [False, "false", "no"])
def test_the_filter_reads_relay_as_ansible_reads_a_boolean(relay):
    weights_peer_plan = FilterModule().filters()["weights_peer_plan"]
    plan_of = {"files": [{"name": "a"}], "fetch": [{"name": "a"}]}
    hostvars = {f"spark0{i}": {"__ds4_weights_plan": plan_of, "_ds4_weights_peer_address": f"10.0.0.{i}"}
                for i in (1, 2, 3)}  # fmt: skip
    spark = weights_peer_plan(sorted(hostvars), hostvars, 18090, relay)["hosts"]
    assert spark["spark03"]["peers"]["a"] == ["http://10.0.0.1:18090"], "two waves: all from the seed"
    spark = weights_peer_plan(sorted(hostvars), hostvars, 18090, "true")["hosts"]
    assert spark["spark03"]["peers"]["a"] == ["http://10.0.0.2:18090", "http://10.0.0.1:18090"]


def test_the_filter_leaves_out_a_spark_that_did_not_reach_the_weights():
    # In upgrade.yml a Spark whose staging failed before the weights is rescued, and so still one of the
    # play's hosts, without a plan or an address: the others plan without it.
    weights_peer_plan = FilterModule().filters()["weights_peer_plan"]
    plan_of = {"files": [{"name": "a"}, {"name": "b"}], "fetch": [{"name": "a"}, {"name": "b"}]}
    hostvars = {
        "spark01": {"__ds4_weights_plan": plan_of, "_ds4_weights_peer_address": "10.0.0.1"},
        "spark02": {"ds4_release": "v0.6.7"},
        "spark03": {"__ds4_weights_plan": plan_of, "_ds4_weights_peer_address": "10.0.0.3"},
    }
    result = weights_peer_plan(["spark01", "spark02", "spark03"], hostvars, "18090")
    assert sorted(result["hosts"]) == ["spark01", "spark03"]
    assert result["hosts"]["spark03"]["peers"] == {
        "a": ["http://10.0.0.1:18090"],
        "b": ["http://10.0.0.1:18090"],
    }
    assert result["hosts"]["spark01"]["serve_to"] == ["10.0.0.3"]


def pair_and_single(order=("spark04", "spark05", "spark01")):
    """spark04 and spark05 a pair (their link 10.77.0.0/24), spark01 a single Spark: all on the LAN."""
    spec = {
        "spark01": {"address": "10.0.0.1"},
        "spark04": {"address": "10.0.0.4", "link": {"pair": "pair01", "address": "10.77.0.1"}},
        "spark05": {"address": "10.0.0.5", "link": {"pair": "pair01", "address": "10.77.0.2"}},
    }
    return [dict(spec[n], name=n, wanted=["a"], fetch=["a"]) for n in order]


@pytest.mark.parametrize("relay", [False, True])
def test_a_pair_peers_over_its_link_and_a_single_spark_on_the_lan_in_one_run(relay):
    """The link addresses of a pair reach its other member alone: a single Spark in the same run fetches
    from either member on the LAN, and each source listens where its receivers reach it."""
    spark = plan(pair_and_single(), 18090, relay=relay)["hosts"]
    assert spark["spark05"]["peers"] == {"a": ["http://10.77.0.1:18090"]}
    assert spark["spark01"]["peers"]["a"][-1] == "http://10.0.0.4:18090"
    assert all(not url.startswith("http://10.77.") for url in spark["spark01"]["peers"]["a"])
    assert spark["spark04"]["serve_to"] == ["10.0.0.1", "10.77.0.2"]
    assert spark["spark04"]["listen"] == ["10.0.0.4", "10.77.0.1"]
    if relay:
        assert spark["spark01"]["peers"]["a"] == ["http://10.0.0.5:18090", "http://10.0.0.4:18090"]
        assert spark["spark05"]["serve_to"] == ["10.0.0.1"] and spark["spark05"]["listen"] == ["10.0.0.5"]
    assert spark["spark01"]["listen"] == spark["spark01"]["serve_to"] == []


def test_a_pair_alone_peers_over_its_link_only_and_a_single_spark_seed_serves_it_on_the_lan():
    spark = plan(pair_and_single(("spark04", "spark05")), 18090)["hosts"]
    assert spark["spark05"]["peers"] == {"a": ["http://10.77.0.1:18090"]}
    assert spark["spark04"]["serve_to"] == ["10.77.0.2"] and spark["spark04"]["listen"] == ["10.77.0.1"]
    spark = plan(pair_and_single(("spark01", "spark04", "spark05")), 18090, relay=False)["hosts"]
    assert spark["spark04"]["peers"] == spark["spark05"]["peers"] == {"a": ["http://10.0.0.1:18090"]}
    assert spark["spark01"]["serve_to"] == ["10.0.0.4", "10.0.0.5"]
    assert spark["spark01"]["listen"] == ["10.0.0.1"]


def test_the_filter_gives_each_member_of_a_declared_pair_its_link_address():
    weights_peer_plan = FilterModule().filters()["weights_peer_plan"]
    plan_of = {"files": [{"name": "a"}], "fetch": [{"name": "a"}]}
    hostvars = {n: {"__ds4_weights_plan": plan_of, "_ds4_weights_peer_address": f"10.0.0.{n[-1]}"}
                for n in ("spark01", "spark04", "spark05")}  # fmt: skip
    pairs = {"pair01": {"coordinator": {"host": "spark04", "address": "10.77.0.1"},
                        "worker": {"host": "spark05", "address": "10.77.0.2"}}}  # fmt: skip
    spark = weights_peer_plan(["spark04", "spark05", "spark01"], hostvars, 18090, False, pairs)["hosts"]
    assert spark["spark05"]["peers"] == {"a": ["http://10.77.0.1:18090"]}
    assert spark["spark01"]["peers"] == {"a": ["http://10.0.0.4:18090"]}
    assert spark["spark04"]["listen"] == ["10.0.0.4", "10.77.0.1"]
    assert weights_peer_plan(["spark04", "spark01"], hostvars, 18090, False, {})["hosts"]["spark04"][
        "listen"
    ] == ["10.0.0.4"]


# -- a relay: serving a file while it still receives it ------------------------------------------------------


def test_a_relay_plan_chains_the_sparks_behind_the_seed_each_falling_back_up_the_chain():
    result = plan(hosts("ab", "ab", "ab", "ab"), 18090, relay=True)
    spark, url = result["hosts"], lambda n: f"http://10.0.0.{n}:18090"
    assert spark["spark01"]["peers"] == {} and spark["spark01"]["relays"] == ["a", "b"]
    assert spark["spark02"]["peers"]["a"] == [url(1)]
    assert spark["spark03"]["peers"]["a"] == [url(2), url(1)]
    assert spark["spark04"]["peers"]["a"] == [url(3), url(2), url(1)]
    # Each serves everyone behind it (they fall back up the chain); the last relays nothing.
    assert spark["spark01"]["serve_to"] == ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert spark["spark03"]["serve_to"] == ["10.0.0.4"] and spark["spark03"]["relays"] == ["a", "b"]
    assert spark["spark04"]["serve_to"] == [] and spark["spark04"]["relays"] == []
    assert (
        "spark01 seeds a from the hub for spark02, spark03, spark04, relaying it to spark02 as it comes"
        in (result["lines"])
    )
    line = "spark03 fetches a from spark02, spark01 (the hub if none can serve it), relaying it to spark04"
    assert f"{line} as it comes" in result["lines"]


def test_a_relay_plan_starts_a_chain_at_each_holder_and_a_holder_relays_nothing():
    spark = plan(hosts("", "", "ab", "ab", "ab"), 18090, relay=True)["hosts"]
    url = lambda n: f"http://10.0.0.{n}:18090"  # noqa: E731
    assert spark["spark03"]["peers"]["a"] == [url(1), url(2)]
    assert spark["spark04"]["peers"]["a"] == [url(2), url(1)]
    assert spark["spark05"]["peers"]["a"] == [url(3), url(1), url(2)]
    assert spark["spark01"]["relays"] == [] and spark["spark03"]["relays"] == ["a", "b"]
    assert spark["spark01"]["serve_to"] == ["10.0.0.3", "10.0.0.4", "10.0.0.5"]


def relay_dir(tmp_path, content, held, ended=False, pid=None):
    """A Spark receiving BASE: its part holding `content` where `held` says, and the list of what its fetch
    has written (PartState.publish's), by a fetch that is alive (this process) unless said."""
    directory = tmp_path / "relay"
    directory.mkdir(exist_ok=True)
    part = bytearray(len(content))
    for start, end in held:
        part[start:end] = content[start:end]
    (directory / f"{BASE}.part").write_bytes(bytes(part))
    digest = hashlib.sha256(content).hexdigest()
    doc = {"size": len(content), "sha256": digest, "held": [list(r) for r in held], "pid": pid or os.getpid(),
           "ended": ended}  # fmt: skip
    (directory / f".{BASE}.part.held.json").write_text(json.dumps(doc))
    return directory


def relaying(directory, relays=(BASE,)):
    return PeerServer(str(directory), "127.0.0.1", 0, ("127.0.0.1",), None, relays)


def test_a_relay_serves_the_bytes_it_holds_and_says_not_yet_for_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.2)
    content = os.urandom(64 << 10)
    directory = relay_dir(tmp_path, content, [(0, 20000), (40000, 50000)])
    with relaying(directory) as server:
        url = f"{peer_url('127.0.0.1', server.port)}/{BASE}"
        # Asked for more than it holds: it sends what it holds from the first byte, and says so.
        got = requests.get(url, headers={"Range": "bytes=100-30000"}, timeout=30)
        assert (got.status_code, got.headers["Content-Range"]) == (206, f"bytes 100-19999/{len(content)}")
        assert got.content == content[100:20000]
        assert got.headers["ETag"] == f'"{hashlib.sha256(content).hexdigest()}"'
        # A byte it does not hold yet: after a bounded wait, "not yet", and the receiver asks again.
        later = requests.get(url, headers={"Range": "bytes=20000-39999"}, timeout=30)
        assert (later.status_code, later.headers.get("X-Ds4-Relay")) == (503, "not-yet")
        # Once its fetch has written them, they are served.
        relay_dir(tmp_path, content, [(0, 50000)])
        later = requests.get(url, headers={"Range": "bytes=20000-39999"}, timeout=30)
        assert (later.status_code, later.content) == (206, content[20000:40000])


def test_a_relay_waits_a_while_for_bytes_its_fetch_is_about_to_write(tmp_path, monkeypatch):
    content = os.urandom(64 << 10)
    directory = relay_dir(tmp_path, content, [(0, 1000)])
    answer = {}
    with relaying(directory) as server:
        url = f"{peer_url('127.0.0.1', server.port)}/{BASE}"
        asking = threading.Thread(
            target=lambda: answer.update(
                r=requests.get(url, headers={"Range": "bytes=1000-1999"}, timeout=30)
            )
        )
        asking.start()
        relay_dir(tmp_path, content, [(0, 2000)])
        asking.join()
    assert (answer["r"].status_code, answer["r"].content) == (206, content[1000:2000])


@pytest.mark.parametrize(
    ("case", "ended", "pid", "relays"),
    [
        pytest.param("ended", True, None, (BASE,), id="its fetch gave up"),
        pytest.param("dead", False, 2**22 + 1, (BASE,), id="its fetch's process is dead"),
        pytest.param("not this run's", False, None, (), id="a file it does not receive in this run"),
    ],
)
def test_a_relay_serves_nothing_of_a_part_it_is_not_receiving(
    tmp_path, monkeypatch, case, ended, pid, relays
):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    monkeypatch.setattr(ds4_peer, "RELAY_START", 0.0)
    content = os.urandom(64 << 10)
    directory = relay_dir(tmp_path, content, [(0, len(content))], ended=ended, pid=pid)
    with relaying(directory, relays) as server:
        got = requests.get(f"{peer_url('127.0.0.1', server.port)}/{BASE}", headers={"Range": "bytes=0-99"},
                           timeout=30)  # fmt: skip
    assert got.status_code == 404, case


def test_a_relay_not_started_yet_says_not_yet_until_its_fetch_begins(tmp_path, monkeypatch):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    directory = tmp_path / "relay"
    directory.mkdir()
    with relaying(directory) as server:
        got = requests.get(f"{peer_url('127.0.0.1', server.port)}/{BASE}", headers={"Range": "bytes=0-99"},
                           timeout=30)  # fmt: skip
    assert (got.status_code, got.headers.get("X-Ds4-Relay")) == (503, "not-yet")


def test_a_receiver_takes_the_file_from_a_relay_as_the_relay_receives_it_and_the_hub_sends_it_once(
    hub, hub_files, tmp_path
):
    want = hub_files[BASE]
    relay, receiver = tmp_path / "relay", tmp_path / "receiver"
    relay.mkdir()
    receiver.mkdir()
    # The hub link paced so that the relay is still receiving while its receiver fetches from it.
    hub.set_network(link_bps=want["size"])
    before = hub.content_bytes
    outcomes = {}
    try:
        with relaying(relay) as server:
            url = peer_url("127.0.0.1", server.port)
            threads = [
                threading.Thread(
                    target=lambda: outcomes.update(relay=hub_file(hub, hub_files, relay).ensure())
                ),
                threading.Thread(
                    target=lambda: outcomes.update(r=hub_file(hub, hub_files, receiver, peers=[url]).ensure())
                ),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            served, relayed = served_once_settled(server), server.relayed
    finally:
        hub.set_network()
    assert outcomes["relay"]["source"] == "hub"
    assert (outcomes["r"]["source"], outcomes["r"]["bytes_from"]) == (url, {url: want["size"]})
    assert hub.content_bytes - before == want["size"], "the file crossed the hub link once"
    assert served == {BASE: want["size"]} and relayed.get(BASE, 0) > 0, "served while it received"
    assert sha256_of(receiver / BASE) == sha256_of(relay / BASE) == want["sha256"]
    assert not (relay / f".{BASE}.part.held.json").exists(), "the relay's list goes with its part"


def test_a_relay_that_dies_costs_its_receiver_a_retry_and_the_next_source_keeping_its_ranges(
    hub, hub_files, seed, tmp_path, monkeypatch
):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    want = hub_files[BASE]
    content = (seed / BASE).read_bytes()
    # A relay that holds the first four pieces and receives no more; then it dies.
    directory = relay_dir(tmp_path, content, [(0, 4 * PIECE)])
    receiver = tmp_path / "receiver"
    receiver.mkdir()
    server = relaying(directory).start()
    relay_url = peer_url("127.0.0.1", server.port)
    with serving(seed) as upstream:
        seed_url = peer_url("127.0.0.1", upstream.port)
        fetch = hub_file(hub, hub_files, receiver, peers=[relay_url, seed_url])
        outcome = {}
        worker = threading.Thread(target=lambda: outcome.update(fetch.ensure()))
        worker.start()
        try:
            deadline = time.monotonic() + 60  # a hang guard
            while PartState.load(str(receiver), BASE, want["size"], want["sha256"]).bytes_done < 4 * PIECE:
                assert worker.is_alive() and time.monotonic() < deadline, "the relay never gave its ranges"
                time.sleep(0.02)
        finally:
            server.stop()
            worker.join()
    assert outcome["source"] == seed_url
    assert outcome["bytes_from"] == {relay_url: 4 * PIECE, seed_url: want["size"] - 4 * PIECE}
    assert sum("trying the next source" in w for w in outcome["warnings"]) == 1
    assert sha256_of(receiver / BASE) == want["sha256"]


def test_a_relay_whose_bytes_fail_the_hash_is_named_and_dropped_and_its_ranges_come_again(
    hub, hub_files, tmp_path, monkeypatch
):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    want = hub_files[BASE]
    content = bytearray(want["path"].read_bytes())
    content[PIECE + 7] ^= 0xFF
    # A relay whose received bytes are wrong (its list and ETag claim the right file).
    directory = relay_dir(tmp_path, bytes(content), [(0, len(content))])
    doc = json.loads((directory / f".{BASE}.part.held.json").read_text())
    (directory / f".{BASE}.part.held.json").write_text(json.dumps(dict(doc, sha256=want["sha256"])))
    receiver = tmp_path / "receiver"
    receiver.mkdir()
    with relaying(directory) as server:
        url = peer_url("127.0.0.1", server.port)
        result = hub_file(hub, hub_files, receiver, peers=[url]).ensure()
    assert result["source"] == "hub" and result["bytes_from"] == {url: want["size"], "hub": want["size"]}
    assert any(f"from the peer {url} had sha256" in w for w in result["warnings"])
    assert sha256_of(receiver / BASE) == want["sha256"]


class _Liar:
    """A server on the peer port that is not a Spark's peer server: each GET is answered by `answer(handler,
    start)` (start: the first byte asked for), each request counted."""

    def __init__(self, answer):
        liar = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                liar.requests += 1
                start = int(self.headers.get("Range", "bytes=0-").removeprefix("bytes=").partition("-")[0])
                answer(self, start)

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = peer_url("127.0.0.1", self.server.server_address[1])

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _fetch_bounded(fetch, what):
    """fetch.ensure() on a thread, given 60 s (a hang guard: the bounds under test are far smaller)."""
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(fetch.ensure()), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), f"the fetch never gave up on {what}"
    return outcome


def test_a_peer_that_says_not_yet_forever_costs_a_try_and_the_file_comes_from_the_hub(
    hub, hub_files, tmp_path, monkeypatch
):
    """Issue 55, finding 1: a local user's server on a Spark's relay port answering "not yet" forever held
    its receivers for the whole fetch timeout; a source that sends no byte for PEER_STALL costs a try."""
    monkeypatch.setattr(ds4_hub, "PEER_STALL", 0.5)
    want = hub_files[BASE]

    def not_yet(handler, start):
        handler.send_response(503)
        handler.send_header("X-Ds4-Relay", "not-yet")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    dest = tmp_path / "receiver"
    dest.mkdir()
    with _Liar(not_yet) as squatter:
        fetch = hub_file(hub, hub_files, dest, peers=[squatter.url])
        outcome = _fetch_bounded(fetch, "a peer saying not yet")
    assert outcome["source"] == "hub" and outcome["bytes_from"] == {squatter.url: 0, "hub": want["size"]}
    assert any(squatter.url in w and "sent no byte" in w for w in outcome["warnings"]), outcome["warnings"]
    assert sha256_of(dest / BASE) == want["sha256"]


def test_a_peer_whose_answer_ends_before_it_starts_costs_a_try_and_the_file_comes_from_the_hub(
    hub, hub_files, tmp_path
):
    """Issue 55, finding 1: a 206 whose Content-Range ends before its start wrote nothing, raised nothing
    and was asked again at once, forever."""
    want = hub_files[BASE]

    first = want["path"].read_bytes()[:1]

    def backwards(handler, start):
        # The first byte honestly (a range cannot end before byte 0), then ranges that end before they start.
        body = first if start == 0 else b""
        handler.send_response(206)
        handler.send_header("ETag", f'"{want["sha256"]}"')
        handler.send_header("Content-Range", f"bytes {start}-{max(start - 1, 0) // 2}/{want['size']}")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    dest = tmp_path / "receiver"
    dest.mkdir()
    with _Liar(backwards) as liar:
        outcome = _fetch_bounded(hub_file(hub, hub_files, dest, peers=[liar.url]), "a backwards range")
    assert outcome["source"] == "hub" and outcome["bytes_from"][liar.url] <= 1
    warnings = outcome["warnings"]
    assert any(liar.url in w and "ends before it starts" in w for w in warnings), warnings
    assert liar.requests <= 4 * 2, "each connection tried it twice at most (one retry for a peer)"
    assert sha256_of(dest / BASE) == want["sha256"]


def test_the_peer_port_is_proved_to_be_this_runs_server_before_its_receivers_are_let_at_it(seed, tmp_path):
    """Issue 55, finding 1: "wait until this Spark listens" took any listener on the peer port, a local
    user's included, and the server that could not bind failed its async job alone. The server says which
    sockets are its own (announce), or why it could not listen; the wait proves the socket each address
    reaches is one of them (ds4_listener's reading of /proc/net/tcp), else names its holder."""
    ready = str(tmp_path / "ready.json")
    uid = os.geteuid()
    with serving(seed) as server:
        ds4_peer.announce(ready, server)
        assert ds4_peer.wait_listening(ready, ["127.0.0.1"], server.port, 30, uid) is None
        # Another uid is not this run's server's, whatever the socket.
        said = ds4_peer.wait_listening(ready, ["127.0.0.1"], server.port, 30, uid + 1)
        assert "not this run's peer server" in said, said
    # A squatter on the port: this run's server could not bind, and the wait says so at once.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(OSError) as bound:
            PeerServer(str(seed), "127.0.0.1", port, ("127.0.0.1",)).start()
        ds4_peer.announce(ready, error=f"cannot serve on 127.0.0.1 port {port}: {bound.value}")
        said = ds4_peer.wait_listening(ready, ["127.0.0.1"], port, 30, uid)
        assert said.startswith(f"cannot serve on 127.0.0.1 port {port}"), said
        # ... naming whoever holds the port instead, as a stranger's socket is named below.
        assert f"held by a socket of {user_name(uid)}" in said, said
        # A stale announcement (a server of an earlier run) does not vouch for the squatter's socket.
        with serving(seed) as earlier:
            ds4_peer.announce(ready, earlier)
        said = ds4_peer.wait_listening(ready, ["127.0.0.1"], port, 30, uid)
        assert "not this run's peer server" in said and str(port) in said, said
    # Nothing announced and nothing listening: the wait ends at its bound and says so.
    os.unlink(ready)
    said = ds4_peer.wait_listening(ready, ["127.0.0.1"], port, 0.3, uid)
    assert "no peer server announced itself" in said, said


class _Gone:
    """A heartbeat whose run is gone (ds4_heartbeat.Heartbeat's interface), counting the looks at it."""

    def __init__(self):
        self.looks = 0

    def alive(self):
        self.looks += 1
        return False

    def why(self):
        return "the run that started it is gone"


def test_a_fetch_whose_run_is_gone_stops_keeping_its_part_and_takes_no_next_source(
    hub, hub_files, seed, tmp_path
):
    """Issue 55, finding 1: a controller killed mid-run left its Sparks' fetches (async, a day) running. A
    fetch whose run is gone stops, keeping what came for the next run, and asks neither the next peer nor
    the hub."""
    want = hub_files[BASE]
    dest = tmp_path / "receiver"
    dest.mkdir()
    before = hub.content_bytes
    # Paced (the whole file in 2 s) so that the run is found gone midway.
    with serving(seed, rate_bps=want["size"] // 2) as server:
        url = peer_url("127.0.0.1", server.port)
        fetch = hub_file(hub, hub_files, dest, peers=[url], heartbeat=_Gone())
        with pytest.raises(ds4_hub.RunGone, match="the run that started it is gone"):
            fetch.ensure()
    assert hub.content_bytes == before, "the hub was not asked"
    assert not (dest / BASE).exists() and (dest / f"{BASE}.part").exists(), "the part stays for the next run"


def test_a_peer_server_whose_run_is_gone_serves_its_connected_peers_then_closes_its_port(seed, tmp_path):
    """Its run touches the heartbeat only while this Spark waits for its own fetches: a holder with nothing
    to fetch serves on while a receiver is connected (whose fetch ends with its own run), then stops."""
    server = serving(seed).start()
    url = f"{peer_url('127.0.0.1', server.port)}/{BASE}"
    gone = _Gone()
    with requests.Session() as receiver:
        assert receiver.get(url, headers={"Range": "bytes=0-9"}, timeout=30).status_code == 206
        worker = threading.Thread(
            target=server.serve_until, args=(time.monotonic() + 60, str(tmp_path / "stop"), gone)
        )
        worker.start()
        deadline = time.monotonic() + 60  # a hang guard: it looks five times a second
        while gone.looks < 3 and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.is_alive(), "it stopped with a receiver connected"
        # Kept alive: the connection is the receiver's next piece's too.
        assert receiver.get(url, headers={"Range": "bytes=10-19"}, timeout=30).status_code == 206
    worker.join(timeout=60)  # a hang guard
    assert not worker.is_alive() and _refused(server.port)


@pytest.mark.parametrize("shape", ["link to a verified copy", "link to a FIFO", "FIFO"])
def test_a_weight_file_swapped_for_a_link_or_a_fifo_is_not_served_and_holds_no_one(seed, tmp_path, shape):
    """Issue 55, finding 7: the server opened weight files with open(), following a link that the weights'
    owner (not root) put in the file's place, and blocking for ever on a FIFO there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if shape == "link to a verified copy":
        # A copy whose record matches it, as the file's own would: the link alone is what is refused.
        target = elsewhere / BASE
        shutil.copy(seed / BASE, target)
        st = target.stat()
        record = json.loads((seed / f".{BASE}.verified.json").read_text())
        record.update(size=st.st_size, mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev)
        (seed / f".{BASE}.verified.json").write_text(json.dumps(record))
    else:
        target = elsewhere / "fifo"
        os.mkfifo(target)
    (seed / BASE).unlink()
    if shape == "FIFO":
        os.mkfifo(seed / BASE)
    else:
        (seed / BASE).symlink_to(target)
    with serving(seed) as server:
        # The time-out is a hang guard: the answer comes at once.
        got = requests.get(f"{peer_url('127.0.0.1', server.port)}/{BASE}", timeout=20)
    assert got.status_code == 404, shape


def test_a_relay_never_serves_its_part_through_a_link_nor_waits_on_a_fifo_there(tmp_path, monkeypatch):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    content = os.urandom(64 << 10)
    directory = relay_dir(tmp_path, content, [(0, len(content))])
    (directory / f"{BASE}.part").unlink()
    os.mkfifo(directory / f"{BASE}.part")
    with relaying(directory) as server:
        got = requests.get(f"{peer_url('127.0.0.1', server.port)}/{BASE}", headers={"Range": "bytes=0-99"},
                           timeout=20)  # fmt: skip
    assert (got.status_code, got.headers.get("X-Ds4-Relay")) == (503, "not-yet")


RUN = "this-runs-token"


@pytest.mark.parametrize("shape", ["not yet", "the right bytes", "the whole file"])
def test_a_listener_on_the_peer_port_without_this_runs_token_costs_a_try_at_once_and_writes_nothing(
    hub, hub_files, tmp_path, shape
):
    """Issue 55, finding 1: a local user's server on a source Spark's peer port, answering "not yet", held
    its receivers for PEER_STALL (330 s) before they took the hub. An answer that does not carry this run's
    token is not this run's peer server: a failed try of that source at once, never a wait, never a byte
    written (even the right bytes under the right ETag: they are not from this run's server)."""
    want = hub_files[BASE]
    content = want["path"].read_bytes()

    def answer(handler, start):
        if shape == "not yet":
            handler.send_response(503)
            handler.send_header("X-Ds4-Relay", "not-yet")
            body = b""
        else:
            ranged = shape == "the right bytes"
            body = content[start:] if ranged else content
            handler.send_response(206 if ranged else 200)
            handler.send_header("ETag", f'"{want["sha256"]}"')
            if ranged:
                handler.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        # Another run's token, or none at all, is the same stranger.
        handler.send_header("X-Ds4-Run", "another-runs-token")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    dest = tmp_path / "receiver"
    dest.mkdir()
    with _Liar(answer) as squatter:
        fetch = hub_file(hub, hub_files, dest, peers=[squatter.url], peer_token=RUN)
        # No PEER_STALL shortened here: the default 330 s would outlast the test's hang guard.
        outcome = _fetch_bounded(fetch, f"a stranger answering {shape}")
    assert outcome["source"] == "hub" and outcome["bytes_from"] == {squatter.url: 0, "hub": want["size"]}
    warnings = outcome["warnings"]
    assert any(squatter.url in w and "not this run's peer server" in w for w in warnings), warnings
    assert squatter.requests <= 4, "one request a connection at most: no retry, no asking again"
    assert sha256_of(dest / BASE) == want["sha256"]


def test_this_runs_peer_server_names_its_run_on_every_answer_and_its_receiver_takes_the_file(
    hub, hub_files, seed, tmp_path, monkeypatch
):
    monkeypatch.setattr(ds4_peer, "RELAY_WAIT", 0.1)
    want = hub_files[BASE]
    content = want["path"].read_bytes()
    (seed / "other.gguf").write_bytes(b"not verified")
    with PeerServer(str(seed), "127.0.0.1", 0, ("127.0.0.1",), token=RUN) as server:
        url = peer_url("127.0.0.1", server.port)
        answers = [
            requests.get(f"{url}/{BASE}", timeout=30),
            requests.get(f"{url}/{BASE}", headers={"Range": "bytes=0-9"}, timeout=30),
            requests.head(f"{url}/{BASE}", timeout=30),
            requests.get(f"{url}/{BASE}", headers={"Range": f"bytes={len(content)}-"}, timeout=30),
            requests.get(f"{url}/other.gguf", timeout=30),
            requests.get(f"{url}/.hidden", timeout=30),
        ]
        assert [a.status_code for a in answers] == [200, 206, 200, 416, 404, 404]
        assert all(a.headers.get("X-Ds4-Run") == RUN for a in answers), [dict(a.headers) for a in answers]
        dest = tmp_path / "receiver"
        dest.mkdir()
        result = hub_file(hub, hub_files, dest, peers=[url], peer_token=RUN).ensure()
    assert result["source"] == url and result["bytes_from"] == {url: want["size"]}
    assert sha256_of(dest / BASE) == want["sha256"]
    # A relay's "not yet" carries it too: the one wait left is for this run's own server.
    content = os.urandom(64 << 10)
    directory = relay_dir(tmp_path, content, [(0, 20000)])
    with PeerServer(str(directory), "127.0.0.1", 0, ("127.0.0.1",), None, (BASE,), token=RUN) as server:
        got = requests.get(
            f"{peer_url('127.0.0.1', server.port)}/{BASE}", headers={"Range": "bytes=30000-"}, timeout=30
        )
    assert (got.status_code, got.headers.get("X-Ds4-Relay"), got.headers.get("X-Ds4-Run")) == (
        503, "not-yet", RUN,
    )  # fmt: skip


def test_a_peer_server_of_another_run_is_not_this_runs_and_the_file_comes_from_the_hub(
    hub, hub_files, seed, tmp_path
):
    want = hub_files[BASE]
    dest = tmp_path / "receiver"
    dest.mkdir()
    with PeerServer(str(seed), "127.0.0.1", 0, ("127.0.0.1",), token="an-earlier-runs-token") as server:
        url = peer_url("127.0.0.1", server.port)
        outcome = _fetch_bounded(hub_file(hub, hub_files, dest, peers=[url], peer_token=RUN), "another run")
    assert outcome["source"] == "hub" and outcome["bytes_from"] == {url: 0, "hub": want["size"]}
    assert sha256_of(dest / BASE) == want["sha256"]
