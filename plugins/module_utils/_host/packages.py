"""Which Debian packages a host lacks, asked of dpkg: the package manager takes seconds to say that a
package is already there, dpkg-query a fraction of one, so that a run with nothing to install stays quick.
Used by the module ds4_packages_missing, before each role's apt task.
"""

from __future__ import annotations

# One line per package dpkg knows: "NAME STATUS", where STATUS is "installed" for an installed one.
FORMAT = "${Package} ${db:Status-Status}\n"


class PackagesError(RuntimeError):
    """dpkg-query failed for another reason than a package it does not know."""


def dpkg_query_argv(names):
    return ["dpkg-query", "--show", f"--showformat={FORMAT}", *names]


def missing(names, rc, stdout, stderr=""):
    """The names, in order, that dpkg-query's output does not show installed. dpkg-query exits 1 when a
    name is unknown to it, which is a missing package, not an error; an architecture suffix
    (`libfoo:arm64`) is compared without it, as dpkg prints ${Package}."""
    if rc not in (0, 1):
        raise _failed(rc, stdout, stderr)
    shown = installed(stdout)
    return [name for name in names if name.split(":", 1)[0] not in shown]


def every_installed(rc, stdout, stderr=""):
    """Every package dpkg-query of no names (dpkg_query_argv([])) shows installed, sorted; any exit status
    but 0 is a failure, since no name could be unknown."""
    if rc != 0:
        raise _failed(rc, stdout, stderr)
    return installed(stdout)


def _failed(rc, stdout, stderr):
    return PackagesError(f"dpkg-query failed (exit {rc}): {stderr.strip() or stdout.strip()}")


def installed(stdout):
    """The packages dpkg-query's output (dpkg_query_argv, of some names or of none: every package dpkg
    knows) shows installed, sorted."""
    names = set()
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == "installed":
            names.add(fields[0])
    return sorted(names)
