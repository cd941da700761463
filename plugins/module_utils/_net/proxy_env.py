"""How a module reaches the site's proxy (ds4_proxy_env) without its credential on any command line.

A proxy URL may carry a `user:password`. Given as a task's `environment:`, Ansible puts each variable on
the remote shell's command line (`/bin/sh -c 'https_proxy=http://u:PW@proxy:3128 ... python3 ...'`), which
`ps` shows to every local user while the module runs and `-vvv` prints. The modules that talk to the
network therefore take the proxy as an option (`proxy_env`, no_log), which reaches them inside their
arguments, and `apply_proxy_env()` sets it in the module's own process environment before any request:
`requests` reads it from there, and every subprocess (git) inherits it. A process's environment is
readable only by its own user and root.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit

# The standard names, in lower case; each may also be given in upper case (_run.settings holds
# ds4_proxy_env to the same names).
PROXY_NAMES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ProxyEnvError(ValueError):
    """A proxy_env the module will not apply; the message names the variable, never a value."""


def proxy_secrets(value):
    """The parts of a proxy variable's VALUE that no output may show: the value, and the user
    information of a URL with its password (as written and decoded)."""
    secrets = {value}
    try:
        userinfo, at, _host = urlsplit(value).netloc.rpartition("@")
    except ValueError:
        userinfo, at = "", ""
    if at:
        user, colon, password = userinfo.partition(":")
        # A token alone may stand in the user's place (http://TOKEN@proxy:3128): then the user is the secret.
        secret = password if colon else user
        secrets.update((userinfo, secret, unquote(secret)))
    return {item for item in secrets if item}


def without_proxy(environ):
    """ENVIRON (a mapping) without any proxy variable, for a process not trusted with the proxy's login."""
    return {name: value for name, value in environ.items() if name.lower() not in PROXY_NAMES}


def apply_proxy_env(proxy_env, environ=None, no_log_values=None):
    """Set PROXY_ENV (a mapping of the standard proxy variables to strings) in ENVIRON (the process's
    own, os.environ, by default), after adding each value's secrets to NO_LOG_VALUES (a module's set).
    Raises ProxyEnvError, before anything is set, for another name or a value that is no string."""
    environ = os.environ if environ is None else environ
    for name, value in (proxy_env or {}).items():
        if not isinstance(name, str) or name.lower() not in PROXY_NAMES:
            # Only a plain variable name is shown: anything else may be a secret written in the wrong place.
            shown = (
                name
                if isinstance(name, str) and _VARIABLE_NAME.fullmatch(name)
                else "a name that is no variable name"
            )
            raise ProxyEnvError(
                f"proxy_env (ds4_proxy_env) may set only {', '.join(PROXY_NAMES)} (lower or upper case), "
                f"not {shown}"
            )
        if not isinstance(value, str):
            raise ProxyEnvError(f"proxy_env (ds4_proxy_env) {name} must be a string")
    for name, value in (proxy_env or {}).items():
        if no_log_values is not None:
            no_log_values.update(proxy_secrets(value))
        environ[name] = value
