"""What a message may show of a public setting that can carry a secret: one rule for every message.

Secret-bearing settings are of two kinds:

- SECRETS: the whole value may be a secret (a token, the gateway's keys, the engine's extra environment,
  the proxy settings with a user:password). A message shows none of it, whatever its type: a string, a
  list or a number is MASK; of a mapping only the names that are plain variable names are shown, each
  value MASK, so that an operator still sees which entry is meant.
- URLS: a URL may carry a user and password (https://user:token@host/...). A message shows a URL (or an
  absolute path) with its userinfo replaced by ***; anything else (a token pasted in the wrong place, a
  list) as MASK.

`shown(name, value)` is the one function every refusal of a setting goes through; `url(text)` masks the
userinfo of every URL in a text (a tool's output, a message built around a URL).
"""

from __future__ import annotations

import json
import re

MASK = "********"
SECRETS = frozenset(("ds4_hf_token", "ds4_gateway_api_keys", "ds4_extra_env", "ds4_proxy_env"))
URLS = frozenset(("ds4_hf_endpoint", "ds4_engine_repo", "ds4_update_url"))
SECRET_BEARING = SECRETS | URLS

# scheme://userinfo@ : the userinfo runs to the last @ before the host's end (RFC 3986 allows no / ? #
# in it). Spaces and newlines are matched too: a URL refused for holding one must not leak the rest.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_URL_OR_PATH = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*://|/)")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def url(text):
    """`text` with the userinfo of each URL in it as ***: https://user:pw@host/x -> https://***@host/x."""
    return _USERINFO.sub(r"\1***@", text)


def _empty(value):
    return value is None or (isinstance(value, (str, list, dict)) and not value)


def _json(value):
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except ValueError:
        return repr(value)


def shown(name, value, secret_names=()):
    """`value` of setting `name` as a message shows it: JSON (so a trailing newline is visible), with
    nothing of a secret in it. `secret_names` adds settings to SECRETS (the argument specs' no_log)."""
    if _empty(value):
        return _json(value)
    if name in URLS:
        return json.dumps(url(value)) if isinstance(value, str) and _URL_OR_PATH.match(value) else MASK
    if name in SECRETS or name in secret_names:
        if isinstance(value, dict):
            names = sorted(
                key if isinstance(key, str) and _PLAIN_NAME.fullmatch(key) else MASK for key in value
            )
            return "{" + ", ".join(f"{json.dumps(key)}: {json.dumps(MASK)}" for key in names) + "}"
        return MASK
    return _json(value)
