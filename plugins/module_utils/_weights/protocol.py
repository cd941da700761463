"""The weight hub's protocol, with requests: names of a file, its metadata, errors and retries.

{endpoint}/{repo}/resolve/{revision}/{file} answers a HEAD with X-Repo-Commit, X-Linked-Size and
X-Linked-Etag (the LFS sha256) and redirects to storage that honours Range. The token goes to the hub's
own origin only: the storage URL is fetched without it.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

# requests (python3-requests on Ubuntu) is a requirement on the target that Ansible does not bring: the
# modules that reach the hub fail with REQUESTS_IMPORT_ERROR as a clear message, not an import traceback.
try:
    import requests
    import urllib3
except ImportError:
    requests = urllib3 = None  # type: ignore[assignment]
    REQUESTS_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    REQUESTS_IMPORT_ERROR = None

TOKEN_VAR = "ds4_hf_token"
CATALOG_VAR = "ds4_model_catalog"
MAX_REDIRECTS = 10
BACKOFF_CAP = 60.0
USER_AGENT = "ds4-fleet/ds4_hub_file"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# What a cut or stalled transfer raises: through requests (HEAD, GET) or straight from urllib3 (body reads).
TRANSIENT_EXC = (
    (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,
        urllib3.exceptions.ReadTimeoutError,
    )
    if requests
    else ()
)


class HubError(Exception):
    """A failure to report as is; `transient` ones are retried."""

    transient = False


class HubAuthError(HubError):
    pass


class HubNotFoundError(HubError):
    pass


class HubRangeError(HubError):
    pass


class HubTransientError(HubError):
    transient = True

    def __init__(self, message, retry_after=None):
        super().__init__(message)
        self.retry_after = retry_after


class HubMismatchError(HubError):
    pass


class HubChangedError(HubError):
    """The file changed under a transfer (another ETag): what came before is of another file."""


class NoSpaceError(HubError):
    def __init__(self, message, shortfall_bytes):
        super().__init__(message)
        self.shortfall_bytes = shortfall_bytes


@dataclass(frozen=True)
class FileRef:
    endpoint: str
    repo: str
    revision: str
    name: str

    @property
    def url(self):
        revision = quote(self.revision, safe="")
        return f"{self.endpoint.rstrip('/')}/{self.repo}/resolve/{revision}/{quote(self.name)}"

    def describe(self):
        return f"repo {self.repo}, revision {self.revision}, file {self.name} on {self.endpoint}"


@dataclass(frozen=True)
class FileMeta:
    size: int | None
    sha256: str | None
    commit: str | None
    etag: str | None
    # Where the content is: the storage URL the hub redirects to, or the resolve URL when it serves it itself.
    location: str | None = None


def new_session(token="", direct=False):
    """A session for the hub; `direct` for a peer on the LAN, which a site's proxy (the http_proxy
    environment, ds4_proxy_env) must not carry nor see."""
    session = requests.Session()
    session.trust_env = not direct
    # identity: the sizes must be the bytes on disk, never a compressed transfer's.
    session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    if token:
        # requests drops this header on a redirect to another host (the storage CDN).
        session.headers["Authorization"] = f"Bearer {token}"
    return session


def origin(url):
    parts = urlsplit(url)
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        parts.port or {"http": 80, "https": 443}.get(parts.scheme),
    )


def raise_for_status(response, ref, authenticated):
    """Map an HTTP error to the error class an operator can act on."""
    code = response.status_code
    if code < 400:
        return
    hub_says = response.headers.get("X-Error-Code") or response.headers.get("X-Error-Message")
    why = f" ({hub_says})" if hub_says else ""
    if code in (401, 403):
        if authenticated:
            hint = f"the token in {TOKEN_VAR} was refused: use one that can read {ref.repo}"
        else:
            hint = f"the repo is gated or private: set {TOKEN_VAR} to a token that can read it"
        raise HubAuthError(f"HTTP {code}{why} for {ref.describe()}: {hint}")
    if code == 404:
        raise HubNotFoundError(
            f"not found (HTTP 404{why}): {ref.describe()}; check the repo, revision and file in {CATALOG_VAR}"
        )
    if code == 416:
        raise HubRangeError(f"HTTP 416 for a ranged request of {ref.describe()}")
    if code == 429 or code >= 500:
        retry_after = response.headers.get("Retry-After", "")
        raise HubTransientError(
            f"HTTP {code}{why} for {ref.describe()}",
            retry_after=int(retry_after) if retry_after.isdigit() else None,
        )
    raise HubError(f"HTTP {code}{why} for {ref.describe()}")


def fetch_metadata(session, ref, timeout):
    """HEAD the resolve URL, following redirects only while they stay on the hub's origin.

    The hub puts the metadata on the redirect that leaves it for storage (and the token must not follow
    it there); a hub that serves the file itself answers with Content-Length and ETag instead.
    """
    url = ref.url
    hub = origin(url)
    for _redirect in range(MAX_REDIRECTS):
        response = session.head(url, allow_redirects=False, timeout=timeout)
        raise_for_status(response, ref, "Authorization" in session.headers)
        if not response.is_redirect:
            break
        target = urljoin(url, response.headers["Location"])
        if origin(target) != hub:
            break
        url = target
    else:
        raise HubError(f"more than {MAX_REDIRECTS} redirects on the hub for {ref.describe()}")
    headers = response.headers
    size = headers.get("X-Linked-Size") or (None if response.is_redirect else headers.get("Content-Length"))
    etag = unquote_etag(headers.get("X-Linked-Etag") or headers.get("ETag"))
    return FileMeta(
        size=int(size) if size is not None else None,
        sha256=etag if etag and SHA256_RE.match(etag) else None,
        commit=headers.get("X-Repo-Commit"),
        etag=etag,
        location=target if response.is_redirect else url,
    )


def unquote_etag(etag):
    return None if etag is None else etag.removeprefix("W/").strip('"')


def retrying(call, *, what, ref, retries, delay, on_retry=None, count=None):
    """Run `call` until it succeeds, retrying transient failures with capped exponential backoff.

    `on_retry(attempt, error)` is told of each wait; `count()` of each try.
    """
    attempt = 0
    while True:
        if count is not None:
            count()
        wait = delay * 2**attempt
        try:
            return call()
        except HubError as e:
            if not e.transient or attempt == retries:
                raise
            error = str(e)
            wait = max(wait, e.retry_after or 0)
        except requests.exceptions.SSLError as e:
            # A ConnectionError to requests, but a certificate does not get better by waiting.
            raise HubError(f"{what} of {ref.describe()} failed: {e}") from e
        except TRANSIENT_EXC as e:
            if attempt == retries:
                raise HubTransientError(f"{what} of {ref.describe()} failed: {e}") from e
            error = f"{type(e).__name__}: {e}"
        attempt += 1
        if on_retry is not None:
            on_retry(attempt + 1, error)
        time.sleep(min(BACKOFF_CAP, wait))
