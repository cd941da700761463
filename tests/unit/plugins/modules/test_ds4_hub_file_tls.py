"""ds4_hub_file over HTTPS, the shipped endpoint's scheme (https://huggingface.co): the hub stand-in served
with a certificate of a site's own CA, as a site's mirror is. The certificate is verified: refused while the
CA is not trusted, with the cause in words; fetched and verified once the CA is in the bundle the client
reads (on a Spark, the system store that Debian's and Ubuntu's python3-requests read)."""

import hashlib
import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.modules import ds4_hub_file

DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"


def run(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as e:
        ds4_hub_file.main()
    return e.value.code, json.loads(capsys.readouterr().out)


def args(tls_hub, hub_files, tmp_path):
    return {
        "endpoint": tls_hub.endpoint,
        "repo": hub_files[DRAFTER]["repo"],
        "file": DRAFTER,
        "dest": str(tmp_path),
        "sha256": hub_files[DRAFTER]["sha256"],
        "retries": 0,
        "retry_delay": 0.01,
    }


def test_an_endpoint_whose_certificate_is_not_trusted_is_refused_saying_why(
    tls_hub, hub_files, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    assert tls_hub.endpoint.startswith("https://")
    rc, out = run(args(tls_hub, hub_files, tmp_path), capsys)
    assert rc == 1 and out["failed"] is True
    assert "CERTIFICATE_VERIFY_FAILED" in out["msg"] or "certificate verify failed" in out["msg"], out["msg"]
    assert not (tmp_path / DRAFTER).exists()


def test_an_endpoint_signed_by_a_trusted_site_ca_is_fetched_and_verified(
    tls_hub, hub_files, site_ca, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(site_ca["ca.pem"]))
    rc, out = run(args(tls_hub, hub_files, tmp_path), capsys)
    assert rc == 0 and out["action"] == "fetched", out
    digest = hashlib.sha256((tmp_path / DRAFTER).read_bytes()).hexdigest()
    assert digest == hub_files[DRAFTER]["sha256"] == out["sha256"]
