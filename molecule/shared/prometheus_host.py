"""A real Prometheus (Debian's package) in a sandbox host, as the scenarios' tests run it on the files
playbooks/monitoring.yml generates. pyproject.toml puts this directory on pytest's path."""

from waits import wait_for


def install_prometheus(host):
    """Prometheus from Debian's package on HOST, its own service off: each test module runs its own."""
    installed = host.run(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus"
        " || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q"
        " --no-install-recommends prometheus)"
    )
    assert installed.rc == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    # The package starts its own on its default configuration: the tests run their own instead.
    host.check_output("systemctl disable --now prometheus.service")


def start_prometheus(host, unit, directory, port):
    """Prometheus as the transient UNIT on DIRECTORY/live/prometheus.yml (its data in DIRECTORY/data),
    once it says it is ready: until then its API answers 503."""
    host.check_output(
        f"systemd-run --unit={unit} prometheus --config.file={directory}/live/prometheus.yml"
        f" --storage.tsdb.path={directory}/data --web.listen-address=127.0.0.1:{port}"
    )
    wait_for(
        f"{unit} ready",
        lambda: host.run(f"curl -fsS --max-time 5 http://127.0.0.1:{port}/-/ready").rc == 0,
        timeout=60,
    )
