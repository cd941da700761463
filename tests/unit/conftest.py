"""Shared fixtures of the unit tests: the weight hub stand-in, started once over its generated data.

The tests mirror the tree they test (tests/unit/plugins/module_utils/<package>/test_<name>.py for
plugins/module_utils/<package>/<name>.py, and so on); their shared helpers (module_runner, settings_cases,
module_utils_graph) stay here.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

HUB_STANDIN = Path(__file__).resolve().parents[1] / "standins" / "hub"
SANDBOX = Path(__file__).resolve().parents[1] / "sandbox"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def _lock_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("run-ds4-fleet")


@pytest.fixture(autouse=True)
def locks_in_a_test_directory(_lock_dir, monkeypatch):
    """The weight fetches' locks in a directory of the tests', never the host's /run/ds4-fleet."""
    from ansible_collections.ds4.fleet.plugins.module_utils._weights import hub as ds4_hub

    monkeypatch.setattr(ds4_hub, "LOCK_DIR", str(_lock_dir))
    return _lock_dir


@pytest.fixture(scope="session")
def hub_data(tmp_path_factory):
    """The directory make_weights.py writes: small real GGUFs under the contract's names, and hub.json."""
    out = tmp_path_factory.mktemp("hub-data")
    subprocess.run(
        [sys.executable, str(HUB_STANDIN / "make_weights.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def hub_files(hub_data):
    """File name -> {repo, commit, size, sha256, role, generation, path} as the stand-in serves them."""
    doc = json.loads((hub_data / "hub.json").read_text())
    files = {}
    for repo, content in doc["repos"].items():
        commit = content["refs"]["main"]
        for name, entry in content["commits"][commit]["files"].items():
            files[name] = dict(entry, repo=repo, commit=commit, path=hub_data / entry["blob"])
    return files


def _load(name, path):
    """A module of the stand-ins or the sandbox, loaded by path: they are not packages, and the product
    never imports them."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def hub_server(hub_data):
    standin = _load("hubstandin", HUB_STANDIN / "hubstandin.py").HubStandin(hub_data).start()
    yield standin
    standin.stop()


@pytest.fixture(scope="session")
def site_ca(tmp_path_factory):
    """A site's own CA and the certificate of a server on loopback that it signed (tests/sandbox/site_ca.py):
    {"ca.pem", "server.pem", "server.key"} -> path."""
    return _load("site_ca", SANDBOX / "site_ca.py").ensure(tmp_path_factory.mktemp("site-ca"))


@pytest.fixture(scope="session")
def tls_hub(hub_data, site_ca):
    """The hub stand-in over HTTPS, its certificate signed by site_ca's CA, as a site's mirror serves it."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(site_ca["server.pem"], site_ca["server.key"])
    standin = _load("hubstandin", HUB_STANDIN / "hubstandin.py").HubStandin(hub_data, tls=context).start()
    yield standin
    standin.stop()


@pytest.fixture
def hub(hub_server):
    """The running stand-in, with no fault left behind by the test."""
    hub_server.clear_faults()
    yield hub_server
    hub_server.clear_faults()
