"""How git reaches the engine repository (ds4_engine_repo) without its credential in any file or argv.

A URL such as `https://builder:TOKEN@git.example/ds4.git` carries a secret. Given to git as it is, the
secret shows in every process list (argv), and `git clone` writes it into the clone's `.git/config`, a
world-readable file of the release. Every git command of the roles therefore goes through `git_remote()`:
git is given the URL without its user information, and the credential only as an HTTP header in git's
environment (`GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n`, git 2.31 or later), scoped to
that one server (`http.<scheme>://<host>/.extraHeader`), so that a redirect to another host never carries
it. A process's environment is readable only by its own user and root.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit


class RemoteError(ValueError):
    """A repository URL whose credential cannot be passed safely; the message never holds the secret."""


class GitRemote:
    """url: what git is given and what a clone records; secrets: the values no output may show."""

    def __init__(self, url, header=None, scope=None, secrets=()):
        self.url = url
        self._header = header
        self._scope = scope
        self.secrets = list(secrets)

    @property
    def has_credential(self):
        return self._header is not None

    def config_env(self, base):
        """The variables to add to BASE (git's environment) that give git the credential, after any
        configuration BASE already passes the same way; {} when there is none."""
        if self._header is None:
            return {}
        try:
            count = int(base.get("GIT_CONFIG_COUNT") or 0)
        except ValueError:
            count = 0
        return {
            f"GIT_CONFIG_KEY_{count}": f"http.{self._scope}.extraHeader",
            f"GIT_CONFIG_VALUE_{count}": self._header,
            "GIT_CONFIG_COUNT": str(count + 1),
        }

    def env(self, base):
        """BASE (a mapping) with the credential added."""
        return {**base, **self.config_env(base)}


def git_remote(url):
    """The GitRemote of URL (ds4_engine_repo). Raises RemoteError for a credential git could only be given
    on its command line (a password in an ssh:// or git:// URL)."""
    try:
        parts = urlsplit(url)
        userinfo, at, hostport = parts.netloc.rpartition("@")
    except ValueError:
        return GitRemote(url)
    if not at:
        return GitRemote(url)
    user, colon, password = userinfo.partition(":")
    if parts.scheme.lower() not in ("http", "https"):
        if colon:
            raise RemoteError(
                f"ds4_engine_repo holds a password in a {parts.scheme or 'non-HTTP'} URL, which git can only "
                "be given on its command line: use an http(s) URL for a password or token, or an SSH key"
            )
        # An SSH login name is no secret, and ssh needs it.
        return GitRemote(url)
    clean = urlunsplit(parts._replace(netloc=hostport))
    # Git decodes %XX in the user information of a URL; the header carries the decoded values.
    credential = f"{unquote(user)}:{unquote(password)}"
    token = base64.b64encode(credential.encode()).decode()
    scope = urlunsplit((parts.scheme.lower(), hostport, "/", "", ""))
    # A token alone often stands in the user's place (https://TOKEN@host/...): then the user is the secret.
    secret = password if colon else user
    secrets = {value for value in (url, userinfo, secret, unquote(secret)) if value}
    return GitRemote(clean, f"Authorization: Basic {token}", scope, sorted(secrets, key=len, reverse=True))
