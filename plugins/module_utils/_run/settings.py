"""What the ds4 roles accept in their public settings, beyond the types and choices of their argument specs.

One owner per rule: each role's meta/argument_specs.yml says a variable's type and choices; this file
says what a type cannot (a port's range, a path the roles may create and chown, a regular expression
that compiles, where a token may travel). The action ds4_settings_check runs both, on the controller, for
every public variable of the roles a play uses, before anything on a host changes:

    check(options, values) -> ["ds4_port must be a port number from 1 to 65535: 70000", ...]

`options` are the argument specs' options (name -> type, elements, choices, no_log, ...), `values` the
play's values by name. A value its spec refuses is reported as such; the others, converted to their
types, go through the rules here: a rule runs only for variables present, and a rule between variables
only when all of them are. Every message names the variable, shows the value through _common.redact (nothing
of a secret-bearing setting, whatever its type; a URL without its userinfo) and says what would be
accepted.
"""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re
from urllib.parse import urlsplit

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.ds4.fleet.plugins.module_utils._common import redact
from ansible_collections.ds4.fleet.plugins.module_utils._common.commit import commit_id
from ansible_collections.ds4.fleet.plugins.module_utils._engine import lineage as ds4_lineage
from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import TARGETS as MAKE_TARGETS
from ansible_collections.ds4.fleet.plugins.module_utils._net.firewall import beyond_loopback
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import PROXY_NAMES
from ansible_collections.ds4.fleet.plugins.module_utils._pair import declaration
from ansible_collections.ds4.fleet.plugins.module_utils._service import launch as ds4_launch
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import (
    SHORT_COMMIT,
    is_commit_release,
    is_release_name,
    short_commit,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights import catalog as ds4_catalog

MASK = redact.MASK
# The argument spec keys Ansible's validator knows; the rest (description, default) is documentation.
SPEC_KEYS = ("type", "elements", "choices", "options", "no_log")

# Directories of the system: a managed directory is never one of these, nor a parent of one.
SYSTEM_DIRS = frozenset(
    (
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
        "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr",
        "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
        "/usr/local/bin", "/usr/local/etc", "/usr/local/include", "/usr/local/lib", "/usr/local/sbin",
        "/usr/local/share", "/usr/sbin", "/usr/share", "/usr/src", "/var", "/var/backups", "/var/cache",
        "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail", "/var/opt", "/var/run",
        "/var/spool", "/var/tmp",
    )
)  # fmt: skip
# Trees that belong to the system or are writable by everyone: nothing the roles own goes inside them.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
    "/sys", "/tmp", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
    "/usr/sbin", "/usr/share", "/usr/src", "/var/tmp", "/var/lock", "/var/run",
)  # fmt: skip
# Directories the roles create, own or chown: each is confined, and none may hold another.
MANAGED_DIRS = ("ds4_root", "ds4_gguf_dir", "ds4_kv_disk_dir", "ds4_engine_build_log_dir")
# Where a directory handed to a user other than root may lie (issue 26): an allow-list, since a deny-list
# of the system's directories always misses one (/usr/local/lib/ds4, from which the root-run watchdog
# imports Python; /var/lib/dpkg; /root/.ssh). Strictly below ds4's own data directory, or below a
# dedicated mount; the weights also below the home of ds4_weights_owner (/home/NAME, never root's).
HANDED_ROOTS = ("/var/lib/ds4", "/srv", "/data", "/mnt")
# Roots shared with other services (/srv/www, a mount's other data): what is handed lies in a directory
# named for ds4 directly below the root (/srv/ds4/kv, /mnt/ds4-nvme). Issue 55: a component containing
# "ds4" anywhere took /srv/www/html/ds4-kv and /mnt/backups/ds4, inside another service's tree.
SHARED_ROOTS = ("/srv", "/data", "/mnt")
_DS4_NAMED = re.compile(r"ds4(?:[-_.][A-Za-z0-9._-]*)?")
# What the roles keep for root inside those roots: the running service's snapshot for a rollback, the
# update check's and the watchdog's state (_ds4_update_state, _ds4_watchdog_state).
ROOT_KEPT = ("/var/lib/ds4/rollback", "/var/lib/ds4/update-check.json", "/var/lib/ds4/watchdog.json")
_HOME = re.compile(r"/home/(?!root/)([a-z_][a-z0-9_-]*)/[^/].*")

_PATH_CHARS = re.compile(r"/[A-Za-z0-9._+@/-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A git branch name without the characters git refuses in one (and no leading dash: never an option).
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
_CUDA_ARCH = re.compile(r"(sm_[0-9]{2,3}[af]?)?")
_COMPUTE_CAP = re.compile(r"[0-9]+\.[0-9]+")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]*\$?")
_MODE = re.compile(r"0[0-7]{3}")
_URL_UNSAFE = re.compile(r"[\s\"'\\%$`\x00-\x1f\x7f]")
_MEMLOCK = re.compile(r"infinity|[0-9]+[KMGT]?")
# No % (a systemd specifier: %i, %n would name another device than written), no quotes or backslashes.
_DEVICE = re.compile(r"(char-|block-|/dev/)[^\s\x00-\x1f\x7f%\"'\\]+ [rwm]+")
_LOG_SIZE = re.compile(r"[0-9]+[kMG]?")
_CALENDAR = re.compile(r"[A-Za-z0-9 ,:.*/~-]+")
_TIME_SPAN = re.compile(r"[0-9]+ ?[a-z]*( [0-9]+ ?[a-z]*)*")
_PERCENT = re.compile(r"([1-9][0-9]?|100)%")
_TLS_NAME = re.compile(r"[A-Za-z0-9*][A-Za-z0-9.:*-]*")
_NETWORK = re.compile(r"[0-9A-Fa-f.:]+(/[0-9]{1,3})?")
# A gateway API key: what may stand in a header unquoted, and long enough not to be guessed.
_GATEWAY_KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")
_DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALERT = re.compile(r"Ds4[A-Za-z0-9]+")
_HAPROXY_NAME = re.compile(r"[A-Za-z0-9._:-]+")
# A label of a host name (an inventory's underscore allowed), as HAProxy's server line may take it.
_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def show(name, value, secret_names=()):
    """The value as a message shows it: _common.redact's rule, the one every message of a setting follows."""
    return redact.shown(name, value, secret_names)


# --- rules on one value: None when it is accepted, else what would be -----------------------------------


def _between(low, high=None, what="a whole number"):
    def rule(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{what} from {low}" + (f" to {high}" if high is not None else " up")
        if value < low or (high is not None and value > high):
            return f"{what} from {low}" + (f" to {high}" if high is not None else " up")
        return None

    return rule


def _above_zero(what="a number of seconds above 0"):
    def rule(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            return what
        return None

    return rule


def _ratio(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return "a number above 0 and at most 1"
    return None


def _matching(pattern, what):
    def rule(value):
        if not isinstance(value, str) or not pattern.fullmatch(value):
            return what
        return None

    return rule


def _release_commit(value):
    """No pin, or a full commit id in either case (the release plan records it in lower case)."""
    if value == "" or commit_id(value):
        return None
    return "empty or a full commit id, 40 hex digits"


def path_problem(value):
    """What is wrong with an absolute path the roles write under, or None: normalised, plain characters."""
    if not isinstance(value, str) or not value.startswith("/"):
        return "an absolute path"
    if not _PATH_CHARS.fullmatch(value):
        return "an absolute path of letters, digits and ._+@-/ (no spaces, quotes, $, % or controls)"
    if posixpath.normpath(value) != value or value.startswith("//"):
        return "a normalised absolute path (no '.', '..', '//' or trailing '/')"
    return None


def managed_dir_problem(value):
    """What is wrong with a directory the roles create and chown, or None.

    Besides path_problem: never a system directory or a parent of one (chowning it would hand the
    system to the service user), never inside a system or world-writable tree."""
    problem = path_problem(value)
    if problem:
        return problem
    if value in SYSTEM_DIRS:
        return "a directory of its own, not a system directory such as " + value
    if any(system.startswith(value + "/") for system in SYSTEM_DIRS):
        return "a directory of its own, not a parent of system directories"
    for tree in SYSTEM_TREES:
        if value.startswith(tree + "/"):
            return f"a directory of its own outside {tree}, which belongs to the system or to everyone"
    return None


def handed_dir_problem(value, home=False):
    """What is wrong with a directory the roles hand to a user other than root, or None: strictly below
    one of HANDED_ROOTS (and, with `home`, below a user's /home/NAME), never in what the roles keep for
    root there. The host walks to it without links and chowns it through a descriptor (ds4_owned_dir)."""
    problem = path_problem(value)
    if problem:
        return problem
    roots = ", ".join(f"{root}/..." for root in HANDED_ROOTS) + (", /home/OWNER/..." if home else "")
    below = any(value.startswith(root + "/") for root in HANDED_ROOTS) or (home and _HOME.fullmatch(value))
    if not below:
        return f"a directory of its own below {roots} (it is handed to a user other than root)"
    for kept in ROOT_KEPT:
        if value == kept or value.startswith(kept + "/"):
            return f"a directory of its own, not {kept}, which the roles keep for root"
    for root in SHARED_ROOTS:
        if value.startswith(root + "/") and not _DS4_NAMED.fullmatch(value[len(root) + 1 :].split("/")[0]):
            shared = ", ".join(SHARED_ROOTS[:-1]) + " or " + SHARED_ROOTS[-1]
            return (
                f"a directory named for ds4 directly below {shared} (such as /srv/ds4/... or "
                "/mnt/ds4-nvme/...), not another's tree"
            )
    return None


def _managed_dir(value):
    return managed_dir_problem(value)


# node_exporter's textfile directory: the package's (/var/lib/prometheus/node-exporter), or a site's below
# the roots a handed directory may lie in. The root-run watchdog writes in it (never through a link:
# _spark.no_follow.write_at), and the role makes it when it manages the exporter.
TEXTFILE_ROOTS = ("/var/lib/prometheus", *HANDED_ROOTS)


def _textfile_dir(value):
    problem = managed_dir_problem(value)
    if problem:
        return problem
    if not any(value.startswith(root + "/") for root in TEXTFILE_ROOTS):
        return "a directory of its own below " + ", ".join(f"{root}/..." for root in TEXTFILE_ROOTS)
    for kept in ROOT_KEPT:
        if value == kept or value.startswith(kept + "/"):
            return f"a directory of its own, not {kept}, which the roles keep for root"
    return None


def _gguf_dir(value):
    return managed_dir_problem(value) or handed_dir_problem(value, home=True)


def _kv_disk_dir(value):
    return None if value == "" else managed_dir_problem(value) or handed_dir_problem(value)


def _path(value):
    return path_problem(value)


def _paths(value):
    if not isinstance(value, list):
        return "a list of absolute paths"
    for item in value:
        problem = path_problem(item)
        if problem:
            return f"a list of absolute paths; {json.dumps(item)} is not {problem}"
    return None


def _adopt_dirs(value):
    # The default names the installer's ~user/gguf: a ~ is expanded on the host.
    if not isinstance(value, list):
        return "a list of directories (absolute, or ~user/...)"
    for item in value:
        text = item
        if isinstance(item, str) and item.startswith("~"):
            account, _slash, rest = item[1:].partition("/")
            if account and not _ACCOUNT.fullmatch(account):
                return f"a list of directories; {json.dumps(item)} names no user after ~"
            text = "/" + rest
        problem = path_problem(text)
        if problem:
            return f"a list of directories (absolute, or ~user/...); {json.dumps(item)} is not {problem}"
    return None


def _url(schemes, what):
    def rule(value):
        if not isinstance(value, str) or _URL_UNSAFE.search(value):
            return what + " without spaces, quotes, backslashes, %, $ or control characters"
        parts = urlsplit(value)
        if parts.scheme not in schemes or (parts.scheme != "file" and not parts.hostname):
            return what
        if parts.username or parts.password:
            return what + " without credentials in it (a URL is printed and logged)"
        return None

    return rule


def _release(value):
    if is_release_name(value):
        return None
    return (
        "an engine release tag: v and three or more numbers, like v0.6.5; or, for a release pinned by "
        f"ds4_release_commit alone, g and its first {SHORT_COMMIT} hex digits, behind a name of yours if you "
        "like (dwarfstar-g67bd55c0a1b2)"
    )


def _branch(value):
    if value == "" or (isinstance(value, str) and _BRANCH.fullmatch(value) and ".." not in value):
        return None
    return "empty or a branch name of the engine's repository, such as main"


def _commit_release(values):
    """A release pinned by commit carries its commit's first digits: the name and the pin must agree."""
    release, commit = values.get("ds4_release"), values.get("ds4_release_commit")
    if not is_commit_release(release) or not isinstance(commit, str):
        return []
    if not commit:
        return [
            f"ds4_release {release} names a release pinned by commit: ds4_release_commit must be its full "
            f'commit, 40 hex digits, beginning {short_commit(release)}; got ""'
        ]
    if commit_id(commit) and not commit.lower().startswith(short_commit(release)):
        return [
            f"ds4_release {release} must carry the first {SHORT_COMMIT} hex digits of ds4_release_commit "
            f"({commit.lower()[:SHORT_COMMIT]}); got {json.dumps(release)}"
        ]
    return []


def _engine_repo(value):
    if not isinstance(value, str) or not value.strip() or _CONTROL.search(value) or value != value.strip():
        return "a git URL or an absolute path, without spaces at its ends or control characters"
    return None


def _proxy_env(value):
    what = (
        "a mapping of http_proxy, https_proxy, no_proxy or all_proxy (lower or upper case) to values "
        "without spaces, quotes, backslashes, % or $"
    )
    if not isinstance(value, dict):
        return what
    for key, item in value.items():
        if not isinstance(key, str) or key.lower() not in PROXY_NAMES:
            return what
        if not isinstance(item, str) or _URL_UNSAFE.search(item):
            return what
    return None


def _make_targets(value):
    what = "a mapping of CUDA arch (sm_121) to one of the make targets " + ", ".join(MAKE_TARGETS)
    if not isinstance(value, dict):
        return what
    for key, item in value.items():
        if not isinstance(key, str) or not key or not _CUDA_ARCH.fullmatch(key) or item not in MAKE_TARGETS:
            return what
    return None


def _words(value):
    if not isinstance(value, list) or not value:
        return "a non-empty list of names such as aarch64"
    if any(not isinstance(item, str) or not _WORD.fullmatch(item) for item in value):
        return "a non-empty list of names such as aarch64"
    return None


def _compute_caps(value):
    if not isinstance(value, list) or not value:
        return "a non-empty list of compute capabilities such as 12.1"
    if any(not isinstance(item, str) or not _COMPUTE_CAP.fullmatch(item) for item in value):
        return "a non-empty list of compute capabilities such as 12.1, each quoted"
    return None


def _unknown_sizes(value):
    what = "a mapping of base, dspark, mtp and dspark_support to whole numbers of bytes, 0 or more"
    if not isinstance(value, dict):
        return what
    for key, item in value.items():
        if key not in ds4_catalog.ROLES or isinstance(item, bool) or not isinstance(item, int) or item < 0:
            return what
    return None


def _optional_bytes(value):
    if value is None:
        return None
    return _between(0, what="null or a whole number of bytes")(value)


def _device_allow(value):
    what = 'a list of "char-NAME PERMS" or "/dev/PATH PERMS" entries (PERMS of r, w, m; no %, quotes or \\)'
    if not isinstance(value, list) or any(not isinstance(i, str) or not _DEVICE.fullmatch(i) for i in value):
        return what
    return None


def _haproxy_interval(value):
    # HAProxy's time format is a whole number with a unit ("inter 0.5s" is refused): the template writes
    # the interval in milliseconds, so it must be a whole number of them, and no more than a day.
    what = "a number of seconds above 0, in whole milliseconds (such as 0.5 or 2), up to 86400"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
        return what
    milliseconds = value * 1000
    return None if abs(milliseconds - round(milliseconds)) < 1e-6 and round(milliseconds) >= 1 else what


def host_address_problem(value):
    """What is wrong with where a server line of HAProxy reaches a host, or None: a host name, an IPv4 or
    an IPv6 address, nothing else (a space or a newline would add words or lines to the configuration)."""
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return None
        except ValueError:
            pass
        name = value[:-1] if value.endswith(".") else value
        if 0 < len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
            return None
    return "a host name, an IPv4 or an IPv6 address"


def _listen_address(value):
    """ds4_node_exporter_listen_address: empty (the default route's address) or an IP address."""
    if value == "":
        return None
    try:
        ipaddress.ip_address(value)
        return None
    except (TypeError, ValueError):
        return "empty (the default route's address) or an IP address (0.0.0.0 or :: for every address)"


def _regex(value):
    if not isinstance(value, str) or not value:
        return "a non-empty regular expression"
    try:
        re.compile(value)
    except re.error as exc:
        return f"a regular expression that compiles (Python re: {exc})"
    return None


def _text(value):
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        return "a non-empty text"
    return None


def _token(value):
    if not isinstance(value, str) or (value and not re.fullmatch(r"[\x21-\x7e]+", value)):
        return "empty, or a token of printable characters without spaces"
    return None


def _serial(value):
    what = "a whole number of Sparks (1 or more), a percentage such as 25%, or a list of those"
    items = value if isinstance(value, list) else [value]
    if not items:
        return what
    for item in items:
        if isinstance(item, bool):
            return what
        if isinstance(item, int) and item >= 1:
            continue
        if isinstance(item, str) and (_PERCENT.fullmatch(item) or (item.isdigit() and int(item) >= 1)):
            continue
        return what
    return None


def _optional_controller_path(value):
    if value == "":
        return None
    problem = path_problem(value)
    return f"empty or {problem}" if problem else None


def _controller_dir(value):
    # A directory on the controller, written as the operator: absolute and on one line is all it takes.
    if isinstance(value, str) and value.startswith("/") and not _CONTROL.search(value):
        return None
    return "an absolute path on the controller, on one line"


def _template_name(value):
    # Where the file is, the settings check finds with the playbook's directory (_fleet.site_template).
    if isinstance(value, str) and value.strip() == value and value and not _CONTROL.search(value):
        return None
    return "the name or the path of a template on the controller, on one line"


def _optional_controller_file(value):
    if value == "" or (isinstance(value, str) and not _CONTROL.search(value) and value.strip() == value):
        return None
    return "empty or the path of a file on the controller, on one line"


def _secret_words(value):
    # Their form (length, characters) is judged with the keys file's, in gateway_problems.
    if isinstance(value, list) and all(isinstance(item, str) and not _CONTROL.search(item) for item in value):
        return None
    return "a list of keys, each on one line"


def _tls_names(value):
    names = value if isinstance(value, list) else []
    if names and all(isinstance(name, str) and _TLS_NAME.fullmatch(name) for name in names):
        return None
    return "a non-empty list of host names or addresses"


def _networks(value):
    if isinstance(value, list) and all(isinstance(i, str) and _NETWORK.fullmatch(i) for i in value):
        return None
    return "a list of addresses or networks such as 10.0.0.0/24 or fd00::/64"


def _alert_for(value):
    # Which alerts have a `for:` to change is the role's (its vars), which refuses other names.
    what = "a mapping of alert names (such as Ds4GpuThrottled) to Prometheus durations such as 10m"
    if not isinstance(value, dict):
        return what
    for name, duration in value.items():
        if not isinstance(name, str) or not _ALERT.fullmatch(name):
            return what
        if not isinstance(duration, str) or not _DURATION.fullmatch(duration):
            return what
    return None


def _task_file(value):
    if value == "" or (isinstance(value, str) and not _CONTROL.search(value) and value.strip() == value):
        return None
    return "empty or the path of a task file on the controller"


RULES = {
    # ds4_common
    "ds4_root": _managed_dir,
    "ds4_release": _release,
    "ds4_release_commit": _release_commit,
    "ds4_cuda_arch": _matching(_CUDA_ARCH, "empty or a CUDA arch like sm_121 or sm_90a"),
    "ds4_gguf_dir": _gguf_dir,
    "ds4_hf_endpoint": _url(("http", "https"), "an http or https URL"),
    "ds4_hf_token": _token,
    "ds4_proxy_env": _proxy_env,
    "ds4_run_lock_wait": _between(0, 86400, "a whole number of seconds"),
    "ds4_site_templates_dir": lambda value: None if value == "" else _controller_dir(value),
    # Under 10 s, renewals every quarter of it would be a module call every two seconds or so.
    "ds4_run_lock_lease": _between(10, 86400, "a whole number of seconds"),
    # ds4_engine
    "ds4_engine_repo": _engine_repo,
    "ds4_engine_branch": _branch,
    "ds4_engine_lineage": lambda value: (
        None if value in ("", *ds4_lineage.LINEAGES) else "empty, fork or upstream"
    ),
    "ds4_releases_keep": _between(2, what="a whole number (the running and the rollback release at least)"),
    "ds4_engine_build_jobs": _between(0, what="a whole number of jobs, 0 for every CPU,"),
    "ds4_engine_build_log_dir": _managed_dir,
    "ds4_engine_make_targets": _make_targets,
    # ds4_preflight
    "ds4_accepted_archs": _words,
    "ds4_accepted_compute_caps": _compute_caps,
    "ds4_cuda_major": _between(1, 99, "a CUDA major version"),
    "ds4_cuda_home": _path,
    "ds4_build_space_bytes": _between(0, what="a whole number of bytes"),
    "ds4_weights_space_bytes": _optional_bytes,
    "ds4_spark_memory_bytes": _optional_bytes,
    "ds4_quantization": _matching(_WORD, "a quantization name such as q2 or q4"),
    "ds4_model_family": _matching(_WORD, "a family name such as glm-5.3-flash"),
    "ds4_pair_port": _between(1, 65535, "a port number"),
    "ds4_weights_unknown_size_bytes": _unknown_sizes,
    # ds4_weights
    "ds4_weights_adopt_dirs": _adopt_dirs,
    "ds4_weights_owner": _matching(_ACCOUNT, "a user name"),
    "ds4_weights_group": _matching(_ACCOUNT, "a group name"),
    "ds4_weights_dir_mode": _matching(_MODE, 'an octal mode in quotes, such as "0755"'),
    "ds4_weights_file_mode": _matching(_MODE, 'an octal mode in quotes, such as "0644"'),
    "ds4_weights_retries": _between(0, what="a whole number of retries"),
    "ds4_weights_retry_delay": _above_zero(),
    "ds4_weights_timeout": _above_zero(),
    "ds4_weights_fetch_timeout": _between(1, what="a whole number of seconds"),
    # An operator sees progress at least every 30 s.
    "ds4_weights_progress_interval": _between(1, 30, "a whole number of seconds"),
    "ds4_weights_in_use": _paths,
    "ds4_weights_connections": _between(1, 64, "a whole number of connections"),
    "ds4_weights_peer_port": _between(1, 65535, "a TCP port"),
    "ds4_weights_peer_rate": _between(0, what="a whole number of bytes per second, 0 for no cap,"),
    "ds4_weights_peer_interface": _matching(
        re.compile(r"[A-Za-z0-9_.:-]{0,15}"), "empty or an interface name such as enp1s0f0np0"
    ),
    # ds4_service (the launch settings themselves are _service.launch's: see launch_problems)
    "ds4_kv_disk_dir": _kv_disk_dir,
    "ds4_start_timeout": _between(1, what="a whole number of seconds"),
    "ds4_stop_timeout": _between(1, what="a whole number of seconds"),
    "ds4_restart_sec": _between(1, what="a whole number of seconds"),
    "ds4_start_limit_burst": _between(1, what="a whole number of starts"),
    "ds4_start_limit_interval": _between(1, what="a whole number of seconds"),
    "ds4_limit_memlock": _matching(_MEMLOCK, "infinity or a number of bytes with an optional K, M, G or T"),
    "ds4_device_allow": _device_allow,
    "ds4_log_rotate": _between(1, what="a whole number of files"),
    "ds4_launch_env_template": _template_name,
    "ds4_logrotate_template": _template_name,
    "ds4_log_maxsize": _matching(_LOG_SIZE, "a number of bytes with an optional k, M or G"),
    "ds4_update_url": _url(("http", "https", "file"), "an http, https or file URL"),
    "ds4_update_check_on_calendar": _matching(_CALENDAR, "a systemd calendar expression on one line"),
    "ds4_update_check_randomized_delay": _matching(_TIME_SPAN, "a systemd time span such as 1h or 30min"),
    # ds4_activate
    "ds4_smoke_prompt": _text,
    "ds4_smoke_expect": _regex,
    "ds4_smoke_max_tokens": _between(1, what="a whole number of tokens"),
    "ds4_smoke_timeout": _between(1, what="a whole number of seconds"),
    "ds4_perf_max_regression": lambda v: None if 0 < v < 100 else "a percentage above 0 and below 100",
    "ds4_perf_prompt_tokens": _between(16, 131072, "a whole number of tokens"),
    "ds4_perf_decode_tokens": _between(2, 16384, "a whole number of tokens"),
    "ds4_perf_runs": _between(1, 20, "a whole number of runs"),
    "ds4_perf_timeout": _between(1, what="a whole number of seconds"),
    "ds4_perf_history": _between(1, 1000, "a whole number of records"),
    # ds4_service: the watchdog and the metrics
    "ds4_watchdog_interval": _between(1, what="a whole number of seconds"),
    "ds4_watchdog_failures": _between(1, what="a whole number of failed probes"),
    "ds4_watchdog_timeout": _between(1, what="a whole number of seconds"),
    # ds4_service: a pair's link (_pair.link.setting_problems judges them together again in ds4_pair_link)
    "ds4_pair_link_interface": _matching(
        re.compile(r"|[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}"), "empty or an interface name such as enP2p1s0f1np1"
    ),
    "ds4_pair_link_prefix": _between(8, 30, "a prefix length"),
    "ds4_pair_link_mtu": lambda v: (
        None
        if not isinstance(v, bool) and isinstance(v, int) and (v == 0 or 576 <= v <= 9216)
        else "0 (none declared) or an MTU from 576 to 9216"
    ),
    "ds4_node_exporter_port": _between(1, 65535, "a TCP port"),
    "ds4_node_exporter_listen_address": _listen_address,
    # The watchdog may write in it (ReadWritePaths=): never a system directory itself.
    "ds4_node_exporter_textfile_dir": _textfile_dir,
    "ds4_metrics_next_generation_bytes": _between(0, what="a whole number of bytes"),
    # ds4_monitoring (on the controller)
    "ds4_monitoring_dir": _controller_dir,
    "ds4_monitoring_alerts_template": _template_name,
    "ds4_monitoring_group": _matching(_GROUP, "an inventory group name"),
    "ds4_monitoring_scrape_interval": _matching(_DURATION, "a Prometheus duration such as 30s"),
    "ds4_monitoring_evaluation_interval": _matching(_DURATION, "a Prometheus duration such as 30s"),
    "ds4_monitoring_engine_down_for": _matching(_DURATION, "a Prometheus duration such as 5m"),
    "ds4_monitoring_gateway_down_for": _matching(_DURATION, "a Prometheus duration such as 5m"),
    "ds4_monitoring_counter_window": _matching(_DURATION, "a Prometheus duration such as 1h"),
    "ds4_monitoring_metrics_stale_seconds": _between(1, what="a whole number of seconds"),
    "ds4_monitoring_alert_for": _alert_for,
    "ds4_monitoring_update_days": _between(0, what="a whole number of days"),
    "ds4_monitoring_restart_loop": _between(1, what="a whole number of restarts"),
    "ds4_monitoring_gateway_group": _matching(_GROUP, "an inventory group name"),
    "ds4_monitoring_gateway_port": _between(1, 65535, "a TCP port"),
    "ds4_monitoring_gateway_backend": _matching(_HAPROXY_NAME, "a HAProxy name (letters, digits, ._:-)"),
    # ds4_gateway (the keys' form and the files are checked with the inventory, in its preflight)
    "ds4_gateway_address": _matching(re.compile(r"\*|[0-9A-Fa-f.:]+"), "* or an IP address"),
    "ds4_gateway_port": _between(1, 65535, "a TCP port"),
    "ds4_gateway_metrics_port": _between(1, 65535, "a TCP port"),
    "ds4_gateway_metrics_address": _matching(
        re.compile(r"|\*|[0-9A-Fa-f.:]+"), "empty (the default route's address), * or an IP address"
    ),
    "ds4_gateway_api_keys": _secret_words,
    "ds4_gateway_api_keys_file": _optional_controller_file,
    "ds4_gateway_tls_cert": _optional_controller_file,
    "ds4_gateway_tls_key": _optional_controller_file,
    "ds4_gateway_tls_names": _tls_names,
    "ds4_gateway_tls_days": _between(1, 36500, "a whole number of days"),
    "ds4_gateway_check_interval": _haproxy_interval,
    "ds4_gateway_check_fall": _between(1, what="a whole number of checks"),
    "ds4_gateway_check_rise": _between(1, what="a whole number of checks"),
    "ds4_gateway_timeout": _between(1, what="a whole number of seconds"),
    "ds4_gateway_connect_timeout": _between(1, what="a whole number of seconds"),
    "ds4_gateway_maxconn": _between(1, what="a whole number of connections"),
    # More than the engine's 64 MiB for images would send a text model more than a vision model takes.
    "ds4_gateway_max_body_mb": _between(1, 64, "a whole number of MiB"),
    "ds4_gateway_config_template": _template_name,
    "ds4_firewall_allow": _networks,
    "ds4_upgrade_gateway_up_timeout": _between(0, what="a number of seconds"),
    # ds4_fleet
    "ds4_upgrade_serial": _serial,
    "ds4_upgrade_max_fail_percentage": _between(0, 100, "a percentage"),
    "ds4_upgrade_drain_timeout": _between(0, what="a number of seconds"),
    "ds4_upgrade_drain_interval": _above_zero(),
    "ds4_upgrade_lb_out_tasks": _task_file,
    "ds4_upgrade_lb_in_tasks": _task_file,
    "ds4_upgrade_summary_json": _optional_controller_path,
    "ds4_status_json": _optional_controller_path,
    "ds4_verify_min_ratio": _ratio,
    "ds4_verify_reference_scale": _above_zero("a number above 0"),
    "ds4_verify_runs": _between(1, 20),
    "ds4_verify_decode_tokens": _between(1, 16384),
    # The engine takes 256 clients at once by default.
    "ds4_verify_concurrent": _between(1, 256),
    "ds4_verify_json": _optional_controller_path,
}

# The launch settings, by _service.launch's name for each: _service.launch validates them (it also runs on
# the host).
# The generation and speculation are the catalog's to judge (_weights.catalog): the launch takes its defaults.
LAUNCH_SETTINGS = {
    "ds4_ctx": "ctx",
    "ds4_host": "host",
    "ds4_port": "port",
    "ds4_kv_disk_dir": "kv_disk_dir",
    "ds4_kv_disk_space_mb": "kv_disk_space_mb",
    "ds4_mem_floor_gb": "mem_floor_gb",
    "ds4_extra_args": "extra_args",
    "ds4_extra_env": "extra_env",
    "ds4_rdma_sysfs_root": "rdma_sysfs_root",
    "ds4_rdma_limit_memlock": "rdma_limit_memlock",
}


# --- rules between values ---------------------------------------------------------------------------------


def _confined_dirs(values):
    """Managed directories that hold one another: a chown or ReadWritePaths= of one would reach the other."""
    present = [(name, values[name]) for name in MANAGED_DIRS if isinstance(values.get(name), str)]
    present = [(name, path) for name, path in present if path and not path_problem(path)]
    out = []
    for name, path in present:
        for other, other_path in present:
            if name != other and (path == other_path or other_path.startswith(path + "/")):
                out.append(
                    f"{name} must be a directory apart from {other} ({other_path}), neither it nor a parent "
                    f"of it; got {json.dumps(path)}"
                )
    return out


def _weights_home(values):
    """The weights below a home only below their owner's: another user could swap what lies below it."""
    path, owner = values.get("ds4_gguf_dir"), values.get("ds4_weights_owner")
    match = _HOME.fullmatch(path) if isinstance(path, str) and isinstance(owner, str) else None
    if not match or match.group(1) == owner:
        return []
    return [
        f"ds4_gguf_dir may be below /home/{match.group(1)} only when ds4_weights_owner is {match.group(1)} "
        f"(a home is its user's to change), not {owner}; got {json.dumps(path)}"
    ]


def _unguarded_engine(values):
    """An engine beyond loopback only behind its firewall: it has no key of its own, and ds4_firewall false
    removes the firewall (issue 40). Judged where both roles' settings are (site.yml, provision.yml)."""
    host, firewall = values.get("ds4_host"), values.get("ds4_firewall")
    if not isinstance(host, str) or firewall is None:
        return []
    try:
        guarded = boolean(firewall, strict=True)
    except TypeError:
        return []  # the argument spec refuses it
    if guarded or not beyond_loopback(host):
        return []
    return [
        f"ds4_host {json.dumps(host)} is beyond loopback, where the engine, which has no key, is kept from "
        "other hosts by the engine firewall alone: it needs ds4_firewall true (with a gateway in the group "
        "gateways, or ds4_firewall_allow), or ds4_host 127.0.0.1; got ds4_firewall false"
    ]


# The ports a Spark listens on, each its own: the engine, the pair's link, the weights relay, node_exporter.
SPARK_PORTS = ("ds4_port", "ds4_pair_port", "ds4_weights_peer_port", "ds4_node_exporter_port")
SSH_PORT = 22


def _own_ports(values):
    """Each port a Spark listens on apart from the others and from SSH's (issue 55: ports were only
    range-checked, and ds4_pair_port 9100 had the pair's rules reset node_exporter's port)."""
    ports = [(name, values.get(name)) for name in SPARK_PORTS]
    pairs = values.get("ds4_pairs")
    for pair, entry in sorted(pairs.items()) if isinstance(pairs, dict) else ():
        if isinstance(entry, dict) and "port" in entry:
            ports.append((f"ds4_pairs {pair}'s port", entry["port"]))
    ports = [(name, port) for name, port in ports if isinstance(port, int) and not isinstance(port, bool)]
    out, seen = [], {}
    for name, port in ports:
        if port == SSH_PORT:
            out.append(f"{name} {port} is SSH's port, which the Sparks are reached on")
        elif port in seen:
            out.append(
                f"{name} {port} is also {seen[port]}: each port a Spark listens on is its own "
                f"({', '.join(SPARK_PORTS)})"
            )
        else:
            seen[port] = name
    return out


def _start_limit(values):
    names = ("ds4_start_limit_interval", "ds4_start_limit_burst", "ds4_restart_sec")
    if not all(isinstance(values.get(n), int) for n in names):
        return []
    interval, burst, restart = (values[n] for n in names)
    if interval > burst * restart:
        return []
    return [
        f"ds4_start_limit_interval ({interval} s) must exceed ds4_start_limit_burst times ds4_restart_sec "
        f"({burst * restart} s), or a crash loop never reaches the start limit"
    ]


def _watchdog_timeout(values):
    timeout, interval = values.get("ds4_watchdog_timeout"), values.get("ds4_watchdog_interval")
    if not (isinstance(timeout, int) and isinstance(interval, int)) or timeout < interval:
        return []
    return [
        f"ds4_watchdog_timeout must be less than ds4_watchdog_interval ({interval} s), or a probe outlasts "
        f"the next; got {timeout}"
    ]


def _token_transport(values, secret_names):
    endpoint, token = values.get("ds4_hf_endpoint"), values.get("ds4_hf_token")
    if not isinstance(endpoint, str) or not token or values.get("ds4_hf_token_over_http") is True:
        return []
    if urlsplit(endpoint).scheme != "http":
        return []
    return [
        f"ds4_hf_endpoint {show('ds4_hf_endpoint', endpoint)} is plain http and ds4_hf_token is set: the "
        "token would cross the network in clear text; use https, or set ds4_hf_token_over_http: true for a "
        "hub on a trusted link"
    ]


def _lineage(values):
    """The engine's lineage the settings make (ds4_engine_lineage, else the kind of ds4_release); the fork's
    when they cannot say (a bad value is refused by its own rule)."""
    try:
        return ds4_lineage.effective(values.get("ds4_engine_lineage", ""), values.get("ds4_release"))
    except ds4_lineage.LineageError:
        return ds4_lineage.FORK


def _catalog(values):
    names = ("ds4_model_catalog", "ds4_model_generation", "ds4_speculation")
    if not all(n in values for n in names):
        return []
    if "ds4_model_family" in values:
        try:
            ds4_catalog.check_family(
                values["ds4_model_catalog"], values["ds4_model_family"], values[names[1]]
            )
        except ds4_catalog.CatalogError as exc:
            # The generation is judged within its family: without one, nothing more can be said of it.
            return [str(exc)]
    try:
        ds4_catalog.model_files(
            *(values[n] for n in names),
            values.get("ds4_quantization"),
            values.get("ds4_extra_quantizations"),
            _lineage(values),
        )
    except ds4_catalog.CatalogError as exc:
        return [str(exc)]
    return _family_context(values)


def _family_context(values):
    """ds4_ctx within the context the generation's family allows (GLM 5.3: 16384, V4.1: 32768)."""
    ctx = values.get("ds4_ctx")
    if isinstance(ctx, str) and ctx.isascii() and ctx.isdigit():
        ctx = int(ctx)
    if not isinstance(ctx, int) or isinstance(ctx, bool):
        return []
    profile = ds4_catalog.serving(values["ds4_model_catalog"], values["ds4_model_generation"])
    most = profile["context_max"]
    if most is None or ctx <= most:
        return []
    own = profile["context_default"] or most
    return [
        f"ds4_ctx {ctx} exceeds the {most} tokens {ds4_catalog.FAMILY_VAR} {profile['family']!r} allows: "
        f"leave ds4_ctx unset for the family's own ({own}), or set one up to {most}"
    ]


def _pairs(values):
    """The shape of ds4_pairs: a pair of one, a Spark in two pairs, an address that is none. What needs the
    members' facts (their own addresses, releases, contexts) is the preflight's (ds4_pair_check)."""
    try:
        declaration.pairs_of(values.get("ds4_pairs"))
    except declaration.PairError as exc:
        return exc.errors
    return []


def gateway_keys(listed, file_text=""):
    """The gateway's keys: those of ds4_gateway_api_keys, then those of its file (one a line, "#" starts a
    comment), each once, in that order."""
    from_file = (line.split("#", 1)[0].strip() for line in file_text.splitlines())
    return list(dict.fromkeys([*(str(key) for key in listed), *(key for key in from_file if key)]))


def gateway_problems(values, keys_file_text, is_file, sparks, addresses=None):
    """What makes the gateway's settings unusable, judged with what only the controller knows: the keys
    file's text, whether the certificate's files are there (`is_file(path)`), the Sparks the inventory
    names and, in `addresses`, where the gateway reaches each ({spark: (the variable that says it, its
    value)}: ds4_gateway_backend_address, else ansible_host, else the inventory name). A bad key is
    named by its position among all of them, never shown."""
    out = []
    for spark, (variable, address) in (addresses or {}).items():
        if not isinstance(spark, str) or not _HAPROXY_NAME.fullmatch(spark):
            out.append(
                f"the inventory name of {spark} must be a HAProxy name (letters, digits, ._:-): it names the "
                "Spark's server line"
            )
        elif host_address_problem(address):
            out.append(
                f"{variable} of {spark} must be {host_address_problem(address)} (it is the gateway's server "
                f"line for the Spark); got {show(variable, address)}"
            )
    keys = gateway_keys(values.get("ds4_gateway_api_keys") or [], keys_file_text)
    if not keys:
        out.append(
            "ds4_gateway_api_keys and ds4_gateway_api_keys_file give no key: a gateway without keys would "
            "serve anyone"
        )
    bad = [str(number) for number, key in enumerate(keys, 1) if not _GATEWAY_KEY.fullmatch(key)]
    if bad:
        out.append(
            "ds4_gateway_api_keys (with ds4_gateway_api_keys_file) has keys that are not 16 or more of "
            f"A-Z a-z 0-9 . _ ~ + / = -: number(s) {', '.join(bad)} of {len(keys)}"
        )
    cert, key = values.get("ds4_gateway_tls_cert") or "", values.get("ds4_gateway_tls_key") or ""
    if bool(cert) != bool(key):
        out.append(
            "ds4_gateway_tls_cert and ds4_gateway_tls_key go together: give both (the operator's "
            "certificate) or neither (a self-signed one)"
        )
    for name, path in (("ds4_gateway_tls_cert", cert), ("ds4_gateway_tls_key", key)):
        if path and not is_file(path):
            out.append(f"{name} names no file on this controller: {json.dumps(path)}")
    if not sparks:
        target = values.get("ds4_target_hosts") or "sparks"
        out.append(
            f"ds4_target_hosts ({target}) names no host: the gateway would have no Spark to send requests to"
        )
    return out


def launch_problems(values):
    """_service.launch's refusals of the launch settings present, each naming its public variable."""
    settings = {key: values[name] for name, key in LAUNCH_SETTINGS.items() if name in values}
    if not settings:
        return []
    settings["lineage"] = _lineage(values)
    # The paths the roles derive themselves are sound here; only the operator's settings are judged.
    settings.update(release_dir="/r", base_model="/b.gguf", dspark_model="/d.gguf", mtp_model="/m.gguf")
    try:
        ds4_launch.validate(settings)
    except ds4_launch.LaunchConfigError as exc:
        return list(exc.errors)
    return []


# The directory settings playbooks/remove.yml acts on: judged on the Spark by the rules of the roles that
# made them, before anything goes (module_utils/ds4_remove.made).
DIRECTORY_SETTINGS = (*MANAGED_DIRS, "ds4_node_exporter_textfile_dir")


def directory_problems(values):
    """The refusals of the directory settings in `values` (DIRECTORY_SETTINGS), each naming its variable."""
    out = []
    for name in DIRECTORY_SETTINGS:
        if name in values:
            what = RULES[name](values[name])
            if what:
                out.append(f"{name} must be {what}; got {json.dumps(values[name])}")
    return out + _confined_dirs(values)


def problems(values, secret_names=()):
    """Every refusal, in the order of RULES and then the rules between variables."""
    out = []
    for name, rule in RULES.items():
        if name not in values:
            continue
        what = rule(values[name])
        if what:
            out.append(f"{name} must be {what}; got {show(name, values[name], secret_names)}")
    out += _confined_dirs(values)
    out += _commit_release(values)
    out += _weights_home(values)
    out += _start_limit(values)
    out += _unguarded_engine(values)
    out += _own_ports(values)
    out += _watchdog_timeout(values)
    out += _token_transport(values, secret_names)
    out += _catalog(values)
    out += _pairs(values)
    out += launch_problems(values)
    # Two rules may say the same of one value (a path _service.launch and the confinement both refuse).
    return list(dict.fromkeys(out))


def expected(spec):
    """What an argument spec accepts, for a message: 'a whole number', 'one of keep, remove, auto', ..."""
    if spec.get("choices"):
        return "one of " + ", ".join(str(c) for c in spec["choices"])
    words = {
        "int": "a whole number",
        "float": "a number",
        "bool": "true or false",
        "dict": "a mapping",
        "list": "a list",
        "path": "a path",
        "str": "a string",
    }
    kind = spec.get("type", "str")
    text = words.get(kind, f"of type {kind}")
    if kind == "list" and spec.get("elements"):
        text += " of " + words.get(spec["elements"], spec["elements"]) + "s"
    return text


_NUMBER_TEXT = {"int": re.compile(r"-?[0-9]+"), "float": re.compile(r"-?[0-9]+(\.[0-9]+)?")}


def _plain_for(kind, value):
    """Whether a value is its type already, or text Ansible converts without losing anything.

    The roles also use the values unconverted, in templates and commands: a list given as a string, a
    number with a trailing newline or a boolean for a number would reach them as such."""
    if kind in _NUMBER_TEXT:
        if isinstance(value, bool):
            return False
        return isinstance(value, (int, float)) or (
            isinstance(value, str) and bool(_NUMBER_TEXT[kind].fullmatch(value))
        )
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    return True


def check(options, values):
    """Every refusal of `values` by the argument specs' `options` and by the rules above."""
    secrets = redact.SECRETS | {name for name, spec in options.items() if spec.get("no_log")}
    typed, refused = {}, []
    for name, spec in options.items():
        if name not in values:
            continue
        value = values[name]
        result = ArgumentSpecValidator({name: {k: spec[k] for k in SPEC_KEYS if k in spec}}).validate(
            {name: value}
        )
        # null only where it is the default (it means "not set", e.g. ds4_weights_space_bytes).
        plain = spec.get("default") is None if value is None else _plain_for(spec.get("type", "str"), value)
        if result.error_messages or not plain:
            refused.append(f"{name} must be {expected(spec)}; got {show(name, value, secrets)}")
        elif spec.get("type") == "path":
            # Ansible expands ~ and $VARS in a path; the roles use the value as given.
            typed[name] = value
        else:
            typed[name] = result.validated_parameters[name]
    return refused + problems(typed, secrets)
