"""module_utils/_host/packages.py: which packages dpkg-query does not show installed."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.packages import (
    PackagesError,
    dpkg_query_argv,
    every_installed,
    missing,
)


def test_the_query_asks_for_name_and_status_of_each_package():
    assert dpkg_query_argv(["git", "logrotate"]) == [
        "dpkg-query",
        "--show",
        "--showformat=${Package} ${db:Status-Status}\n",
        "git",
        "logrotate",
    ]


def test_packages_not_installed_or_unknown_to_dpkg_are_missing_in_the_order_asked():
    # dpkg-query exits 1 when it knows a name not at all; a removed package shows config-files.
    stdout = "git installed\nlogrotate config-files\n"
    names = ["logrotate", "git", "nftables"]
    assert missing(names, 1, stdout, "dpkg-query: no packages found matching nftables") == [
        "logrotate",
        "nftables",
    ]


def test_an_architecture_suffix_is_compared_without_it():
    assert missing(["libc6:arm64", "git"], 0, "libc6 installed\ngit installed\n") == []


def test_a_dpkg_failure_is_an_error_not_a_missing_package():
    with pytest.raises(PackagesError, match="exit 2"):
        missing(["git"], 2, "", "dpkg-query: error: database locked")


def test_every_installed_package_is_listed_sorted_and_any_failure_of_dpkg_is_an_error():
    stdout = "netbase installed\nlogrotate config-files\nbash installed\n"
    assert every_installed(0, stdout) == ["bash", "netbase"]
    # Asked of no names, dpkg-query has no unknown name to exit 1 for.
    with pytest.raises(PackagesError, match=r"\(exit 1\): dpkg-query: error: database locked"):
        every_installed(1, "", "dpkg-query: error: database locked")
