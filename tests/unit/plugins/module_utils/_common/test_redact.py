"""module_utils/_common/redact.py: what a message shows of a setting that may carry a secret."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import (
    MASK,
    SECRET_BEARING,
    SECRETS,
    URLS,
    shown,
    url,
)
from settings_cases import OPTIONS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:s3cret@host/x.git", "https://***@host/x.git"),
        ("https://ghp_token@github.com/o/r.git", "https://***@github.com/o/r.git"),
        ("http://u:p@ss@host:8080", "http://***@host:8080"),
        ("https://user:pa ss@host/a b", "https://***@host/a b"),
        ("cloning https://u:pw@forge/ds4.git failed", "cloning https://***@forge/ds4.git failed"),
        (" https://u:pw@x/ds4.git\n", " https://***@x/ds4.git\n"),
        ("https://huggingface.co/org/repo@main", "https://huggingface.co/org/repo@main"),
        ("/srv/git/ds4.git", "/srv/git/ds4.git"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ],
)
def test_a_url_is_shown_without_its_userinfo(text, expected):
    assert url(text) == expected


def test_the_secret_settings_are_those_the_argument_specs_keep_out_of_logs():
    """A setting an argument spec marks no_log is a secret here too, and the other way round: Ansible's
    own messages and ours keep the same values out."""
    assert sorted(name for name, spec in OPTIONS.items() if spec.get("no_log")) == sorted(SECRETS)
    assert set(OPTIONS) >= SECRET_BEARING and URLS.isdisjoint(SECRETS)


MARKER = "Mk-7f3e9-SECRET"


@pytest.mark.parametrize("name", sorted(SECRETS))
@pytest.mark.parametrize(
    "value",
    [MARKER, [MARKER], {"KEY": MARKER}, {MARKER: "v"}, {"KEY": [MARKER]}, 73556081, [73556081], 1.5, True],
)
def test_a_secret_is_shown_as_masked_whatever_its_type(name, value):
    text = shown(name, value)
    assert MARKER not in text and "73556081" not in text and MASK in text


def test_a_mapping_of_secrets_shows_its_plain_names_only():
    assert shown("ds4_extra_env", {"OPENAI_API_KEY": "sk", "bad name": "x"}) == (
        f'{{"{MASK}": "{MASK}", "OPENAI_API_KEY": "{MASK}"}}'
    )


@pytest.mark.parametrize("name", sorted(URLS))
def test_a_url_setting_is_shown_with_its_userinfo_masked_and_otherwise_whole(name):
    assert shown(name, "https://u:pw@host/a b") == '"https://***@host/a b"'
    assert shown(name, "https://host/x\n") == '"https://host/x\\n"'
    assert shown(name, ["https://u:pw@host"]) == MASK
    # A token pasted into a URL setting is no URL: nothing of it is shown.
    assert shown(name, "hf_AbCdEf0123456789") == MASK


def test_an_empty_value_and_any_other_setting_are_shown_as_json():
    assert shown("ds4_hf_token", "") == '""'
    assert shown("ds4_extra_env", {}) == "{}"
    assert shown("ds4_port", "8000\n") == '"8000\\n"'
    assert shown("ds4_gguf_dir", ["/x"], secret_names=("ds4_gguf_dir",)) == MASK
