"""playbooks/remove.yml on a Spark behind the gateway (issue 28): site.yml then remove.yml leaves spark02 as
the image made it, but for the weights kept, its packages too (those the roles installed and what apt
brought in beside them); a check run lists and changes nothing; a second run changes nothing; the last
Spark serving behind the gateway is refused.

The listing (molecule/shared/listing.sh) is of what the roles may touch: paths, /etc's contents, users,
groups, unit files, running units, nftables tables and packages. prepare.yml took it before site.yml.
"""

import os
from pathlib import Path

import pytest
from nested import play
from spark import sandbox_host

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
BEFORE = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
LISTING = (ROOT / "molecule" / "shared" / "listing.sh").read_text()
REMOVE = ROOT / "playbooks" / "remove.yml"


def items(text):
    """The listing's lines, each prefixed with its section: a set to compare."""
    found, section = set(), ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif line.strip():
            found.add(f"{section}: {line}")
    return found


def listing(host):
    return items(host.check_output("bash -c %s", LISTING))


def difference(before, after):
    """What differs, one line each: `-` only before, `+` only after."""
    return sorted(f"- {line}" for line in before - after) + sorted(f"+ {line}" for line in after - before)


def still(found):
    """A serving Spark's listing without the units that run on their own timers."""
    return {line for line in found if not line.startswith("running: ") or "ds4.service" in line}


def remove(*args):
    return play(REMOVE, *args, inventory=INVENTORY)


def kept_weights(line):
    """A line of the weights kept: the weights directory, what is in it, and the state directory above it."""
    return line.startswith(("+ paths: /var/lib/ds4 ", "+ paths: /var/lib/ds4/gguf"))


@pytest.mark.ends_scenario
def test_remove_takes_ds4_off_a_spark_and_refuses_the_last_one_serving():
    spark01 = sandbox_host("spark01")
    spark02 = sandbox_host("spark02")
    before = items((BEFORE / "before-spark02.txt").read_text())
    converged = listing(spark02)
    assert "packages: nftables" in converged - before, "the roles installed no package to record"

    # 1. Check mode lists what would go, and nothing goes.
    check = remove(
        "--check", "-l", "spark02", "-e", "ds4_remove_weights=true", "-e", "ds4_remove_packages=true"
    )
    assert check.rc == 0, check
    said = check.result("Stop ds4 and remove what the roles made", "spark02").data["lines"]
    for line in (
        "unit ds4.service: stopped and disabled, would go",
        "nftables table inet ds4_engine: would go",
        "/etc/ds4: would go",
        "user ds4: would go",
        "package nftables: would go (purged)",
    ):
        assert line in said, said
    assert difference(converged, listing(spark02)) == []

    # 2. Removed, weights kept, packages purged: those the roles installed and what apt brought in beside
    # them (netbase and libnftnl11 with nftables, told by the packages installed before site.yml, which
    # the record keeps): as before site.yml but for the weights.
    first = remove("-l", "spark02", "-e", "ds4_remove_packages=true")
    assert first.rc == 0, first
    assert first.changed("spark02") > 0
    purged = first.result("Stop ds4 and remove what the roles made", "spark02").data["packages"]
    assert {"nftables", "netbase"} <= set(purged), purged
    removed = difference(before, listing(spark02))
    assert any(line.startswith("+ paths: /var/lib/ds4/gguf/DeepSeek") for line in removed), removed
    assert [line for line in removed if not kept_weights(line)] == []

    # 3. Again: nothing left to change.
    again = remove("-l", "spark02", "-e", "ds4_remove_packages=true")
    assert again.rc == 0, again
    assert again.changed("spark02") == 0, again

    # 4. The weights too: exactly as before site.yml.
    weights = remove("-l", "spark02", "-e", "ds4_remove_weights=true")
    assert weights.rc == 0, weights
    assert difference(before, listing(spark02)) == []

    # 5. spark01 is now the last Spark serving behind the gateway: refused, and nothing changes on it (but
    # what runs now and then on its own: the watchdog's and the update check's oneshot runs).
    serving = still(listing(spark01))
    refused = remove("-l", "spark01")
    assert refused.rc != 0, refused
    assert refused.said("spark01 is the last Spark serving behind the gateway gw01"), refused
    assert refused.said("-e ds4_remove_force=true"), refused
    assert difference(serving, still(listing(spark01))) == []
    assert spark01.service("ds4.service").is_running
