"""The pair scenario's two members and what its tests read of them: spark04 coordinates and spark05 works
for the pair pair01 (molecule.yml)."""

from nested import PROJECT, play
from spark import ask, sandbox_host

COORDINATOR, WORKER = "spark04", "spark05"
UNITS = {COORDINATOR: "ds4.service", WORKER: "ds4-worker.service"}


def answers(host):
    """The coordinator's answer to the smoke question, or None while the pair does not answer."""
    reply = ask(host, check=False)
    return reply if reply and "Paris" in reply else None


def state(host):
    """What a refused run must not change: the engine's process, launch files, units, firewall, links,
    weights and netplan files, with their times."""
    return host.check_output(
        "systemctl show ds4.service ds4-worker.service ds4-firewall.service -p Id -p MainPID -p ActiveState; "
        "stat -c '%n %s %Y' /etc/ds4/ds4.env /etc/systemd/system/ds4*.service /etc/systemd/system/ds4*.d/*; "
        "ls -l --time-style=+%s.%N /opt/ds4 /var/lib/ds4/gguf; nft list table inet ds4_engine; ip -br addr; "
        "ls -l --time-style=+%s.%N /etc/netplan 2>&1 || true"
    )


def site_run(*args, limit="pair01", drop=None, inventory=None):
    """site.yml on LIMIT with ARGS, with the nftables rule DROP (e.g. `tcp dport 22 ip saddr 10.77.0.1
    drop`) on the worker while it runs: the run, and both members' state before and after it."""
    hosts = {name: sandbox_host(name) for name in (COORDINATOR, WORKER)}
    if drop:
        chain = f"chain input {{ type filter hook input priority -10; {drop}; }}"
        hosts[WORKER].check_output("nft %s", f"table inet ds4_pair_test {{ {chain}; }}")
    try:
        before = {name: state(host) for name, host in hosts.items()}
        run = play(PROJECT / "site.yml", "-l", limit, *args, inventory=inventory)
        after = {name: state(host) for name, host in hosts.items()}
    finally:
        if drop:
            hosts[WORKER].check_output("nft delete table inet ds4_pair_test")
    return run, before, after
