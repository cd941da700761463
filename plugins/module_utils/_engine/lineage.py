"""Which engine a release is: the fork (`Entrpi/ds4`, tagged) or upstream (`antirez/ds4`, no tags), and
what that changes in what the provisioner writes and asks (engine contract, "The engine owners run in
late 2026").

The lineage is declared (`ds4_engine_lineage`), or follows the release: a tag is the fork's (upstream has
none), a release pinned by commit is upstream's. Either way it is known from the settings alone, before
anything changes, and the plan holds it to the source at the commit (`source_lineage`, over the output of
`git grep` there) and to a release already built (`built_lineage`, its stamp), the build to the built
server's `--help` (`help_lineage`): a mismatch is refused, naming the variable. A tag's source is not read:
upstream has no tags, and a mirror's tag on upstream's source is caught by the built server's `--help`
before the build is renamed into place, and by its stamp on every run after.

- speculation (dspark): the fork `DS4_CONT_DSPARK=1 DS4_DSPARK_MODEL=FILE` (its `--dspark FILE`) with the
  drafter `DSpark-drafter-Q2K-Q8-0731.gguf`; upstream `--dspark --mtp-model FILE` with the support GGUF
  `DeepSeek-V4-Flash-DSpark-support-0731.gguf` (the catalog's role `dspark_support`).
- `/metrics`, `/v1/stats`: the fork serves both; upstream neither (nor `/health`).
- readiness: `GET /v1/models` on both; liveness: the fork's `/metrics`, upstream's `/v1/models`.
- requests in flight (drain, watchdog): the fork's `/metrics`, else `/v1/stats`; upstream has no count, and
  the engine's own drain on SIGTERM is all there is.

Standard library only.
"""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import is_release_tag

VARIABLE = "ds4_engine_lineage"
FORK = "fork"
UPSTREAM = "upstream"
LINEAGES = (FORK, UPSTREAM)

# What the source says of itself (git grep -F at the commit). Only the fork serves /v1/stats; only
# upstream's server takes --mtp-model (its DSpark support file). Guessed markers, from the contract's
# flags and endpoints: the real sources were out of reach; the stand-ins follow the same markers.
FORK_MARK = "/v1/stats"
UPSTREAM_MARK = "--mtp-model"
MARKS = (FORK_MARK, UPSTREAM_MARK)

# The catalog's file role for each lineage's speculation by drafter.
DSPARK_ROLE = {FORK: "dspark", UPSTREAM: "dspark_support"}

# ds4-server flags of upstream alone (late 2026): the fork's server refuses them as unknown options.
UPSTREAM_ONLY_FLAGS = (
    "--mtp-model",
    "--ssd-streaming",
    "--ssd-streaming-cache-experts",
    "--tensor-parallel",
    "--transport",
    "--rdma-device",
    "--rdma-gid-index",
    "--batched-session",
    "--power",
    "--think-level",
    "--kv-cache-reject-different-quant",
)

# The engine's HTTP paths each lineage serves that the provisioner reads; None: not served.
PROBES = {
    FORK: {"ready": "/v1/models", "alive": "/metrics", "inflight": "/metrics", "metrics": "/metrics"},
    UPSTREAM: {"ready": "/v1/models", "alive": "/v1/models", "inflight": None, "metrics": None},
}


class LineageError(ValueError):
    """A lineage that does not fit the settings or the source; the message names the variable."""


def effective(declared, release):
    """The lineage a host runs: DECLARED (ds4_engine_lineage), or "" to follow RELEASE (ds4_release): a tag
    is the fork's, a release pinned by commit upstream's."""
    if declared in LINEAGES:
        return declared
    if declared not in ("", None):
        raise LineageError(f"{VARIABLE} must be empty, fork or upstream; got {declared!r}")
    return FORK if is_release_tag(release) else UPSTREAM


def source_lineage(found):
    """The lineage the source at a commit shows, from FOUND, the markers `git grep` found there; None when
    it shows neither (a source before both, or another engine)."""
    found = set(found)
    if FORK_MARK in found:
        return FORK
    if UPSTREAM_MARK in found:
        return UPSTREAM
    return None


def built_lineage(stamp):
    """The lineage a built release's STAMP (release_plan.read_stamp's) records, as its built server's --help
    showed it; None without a stamp, or for one written before it recorded the lineage."""
    found = stamp.get("lineage") if isinstance(stamp, dict) else None
    return found if found in LINEAGES else None


def help_lineage(text):
    """The lineage a built ds4-server's `--help` shows: upstream's lists --mtp-model, the fork's does not
    and takes --dspark FILE."""
    if UPSTREAM_MARK in text:
        return UPSTREAM
    if "--dspark FILE" in text:
        return FORK
    return None


def check_source(lineage, shown, release, commit, where):
    """Refuse a LINEAGE that the source (or the built server) shows otherwise; SHOWN None says nothing."""
    if shown is None or shown == lineage:
        return
    why = {
        FORK: f"it serves {FORK_MARK}, which only the fork does",
        UPSTREAM: f"it takes {UPSTREAM_MARK} and serves no {FORK_MARK}, as only upstream does",
    }[shown]
    raise LineageError(
        f"{VARIABLE} makes release {release} (commit {commit}) {lineage}'s, but {where} is {shown}'s: {why}. "
        f"Set {VARIABLE}: {shown}, or pin a release of the {lineage} (ds4_release, ds4_release_commit, "
        "ds4_engine_repo)"
    )


def extra_args_problems(lineage, extra_args):
    """ds4_extra_args that the lineage's server does not take: upstream's own flags on the fork."""
    if lineage != FORK or not isinstance(extra_args, list):
        return []
    flags = sorted({str(arg).split("=", 1)[0] for arg in extra_args} & set(UPSTREAM_ONLY_FLAGS))
    if not flags:
        return []
    return [
        f"ds4_extra_args has {', '.join(flags)}, upstream's own flag(s), but {VARIABLE} makes this Spark run "
        "the fork, whose ds4-server refuses them as unknown options: remove them, or run upstream "
        f"({VARIABLE}: upstream with a release pinned by commit)"
    ]


def probes(lineage):
    """The paths the readiness, liveness, drain and monitoring probes read on LINEAGE's engine."""
    if lineage not in LINEAGES:
        raise LineageError(f"{VARIABLE} must be fork or upstream; got {lineage!r}")
    return dict(PROBES[lineage])
