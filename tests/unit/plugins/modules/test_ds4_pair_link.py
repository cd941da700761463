"""The module ds4_pair_link: the link's netplan file written only where it differs, generated and applied,
put back when netplan refuses it, in check and diff mode; the link check's refusals; netplan missing."""

import os

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.modules import ds4_pair_link
from module_runner import run_module


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A Spark of the test's: a fake netplan that records its calls and fails `generate` on demand."""
    calls = []
    state = {"generate_rc": 0, "netplan": "/usr/sbin/netplan"}

    def run_command(self, argv, **kwargs):
        calls.append(argv[1:])
        if argv[1:] == ["generate"] and state["generate_rc"]:
            return state["generate_rc"], "", "Error in network definition: unknown key 'mtu'"
        if argv[1:] == ["apply"] and state.get("apply_rc"):
            return state["apply_rc"], "", "Failed to apply: link busy"
        return 0, "", ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, **kw: state["netplan"])
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: None)  # root's file; the test may not be root
    args = {
        "pair": "pair01",
        "role": "coordinator",
        "host": "spark04",
        "peer": "spark05",
        "address": "10.77.0.1",
        "peer_address": "10.77.0.2",
        "netplan": True,
        "interface": "enP2p1s0f1np1",
        "mtu": 9000,
        "path": str(tmp_path / "60-ds4-pair-link.yaml"),
    }
    return args, calls, state, tmp_path / "60-ds4-pair-link.yaml"


def test_the_file_is_written_root_only_generated_and_applied_once(host):
    args, calls, _state, path = host
    rc, result = run_module(ds4_pair_link, dict(args, _ansible_diff=True))
    assert rc == 0 and result["changed"], result
    assert "addresses: [10.77.0.1/24]" in path.read_text() and "mtu: 9000" in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert calls == [["generate"], ["apply"]]
    assert result["diff"]["before"] == "" and result["diff"]["after"] == path.read_text()
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 0 and not result["changed"] and calls == [["generate"], ["apply"]]


def test_check_mode_says_what_would_change_and_changes_nothing(host):
    args, calls, _state, path = host
    rc, result = run_module(ds4_pair_link, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert rc == 0 and result["changed"] and "10.77.0.1/24" in result["diff"]["after"]
    assert not path.exists() and calls == []


def test_a_file_netplan_refuses_is_put_back_as_it_was(host):
    args, calls, state, path = host
    path.write_text("# the site's own\n")
    state["generate_rc"] = 1
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 1 and "netplan generate refused the link's file for enP2p1s0f1np1" in result["msg"]
    assert "put back as it was" in result["msg"] and "unknown key 'mtu'" in result["msg"]
    assert path.read_text() == "# the site's own\n" and calls == [["generate"]]
    path.unlink()
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 1 and not path.exists()


def test_without_netplan_the_setting_is_refused_by_name_and_nothing_written(host):
    args, calls, state, path = host
    state["netplan"] = None
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 1 and result["msg"].startswith("ds4_pair_link_manage is on, but spark04 has no netplan")
    assert not path.exists() and calls == []


def test_bad_settings_are_refused_before_anything_is_written(host):
    args, calls, _state, path = host
    rc, result = run_module(ds4_pair_link, dict(args, interface="", mtu=100))
    assert rc == 1 and result["msg"].startswith("ds4_pair_link_interface must name")
    assert "ds4_pair_link_mtu must be 0" in result["msg"]
    assert not path.exists() and calls == []


def test_the_check_refuses_a_peer_that_does_not_answer_and_passes_one_that_does(host, monkeypatch):
    args, _calls, _state, path = host
    checked = dict(args, netplan=False, check=True)
    rc, result = run_module(ds4_pair_link, dict(checked, peer_address="127.0.0.1"))
    assert rc == 0 and not result["changed"], result
    monkeypatch.setattr(
        ds4_pair_link,
        "link_problem",
        lambda *a: "ds4_pair_link_mtu 9000 does not hold from spark04 to spark05",
    )
    rc, result = run_module(ds4_pair_link, checked)
    assert rc == 1 and result["msg"].startswith("ds4_pair_link_mtu 9000 does not hold") and not path.exists()


def test_a_file_netplan_cannot_apply_is_put_back_so_that_the_next_run_applies_it_again(host):
    args, calls, state, path = host
    state["apply_rc"] = 1
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 1 and result["msg"].startswith("netplan apply failed, the link's file put back as it was")
    assert not path.exists() and calls == [["generate"], ["apply"]]
    state["apply_rc"] = 0
    rc, result = run_module(ds4_pair_link, args)
    assert rc == 0 and result["changed"] and path.exists()
    assert calls == [["generate"], ["apply"], ["generate"], ["apply"]]
