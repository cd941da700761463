#!/usr/bin/env python3
"""Bring sandbox Sparks up and down: local systemd hosts that play DGX Sparks.

Each sandbox is a Podman network holding:
- `forge`: serves the STAND-INS for what these machines cannot reach: the engine's git repository
  (git daemon) and the weight hub plus release feed (tests/standins/hub). Hosts reach it as `forge`.
- one container per Spark, booted with systemd and reached over SSH on a loopback port, with the
  stand-in GPU/CUDA tools of its persona installed.
- for Sparks `behind_proxy` (a Molecule platform key), a second network that holds them and `proxy`, a
  real HTTP proxy (Debian's tinyproxy) on both networks: like a site whose Sparks reach GitHub and the hub
  only through its proxy, they cannot reach `forge` directly. The forge also serves the engine repository
  over HTTP (http://forge:18082/cgi-bin/git/ds4.git), which a proxy carries and git's own protocol is not,
  and once more behind a password (http://builder:S3cretTok3n@forge:18083/ds4.git, a private mirror's way).
  The hub and feed are also served over HTTPS (https://forge:18443), and the engine repository
  (https://forge:18445/ds4.git), signed by a site's own CA (site_ca.py, .sandbox/tls/) that every Spark
  trusts in its system store, as a site's mirror is.
- for Sparks cabled as a pair (`pair_link`, a Molecule platform key: {link: NAME, address: A.B.C.D/24}),
  a network of the pair's own, NAME, that only its two Sparks share: their direct QSFP link. Each Spark's
  interface on it is named as on DGX OS (enP2p1s0f1np1) and holds only the static address the key gives,
  set from outside the container (nothing on the link hands out addresses, as on a real cable). Each has a
  stand-in RDMA device on it (tests/standins/rdma: sysfs files under /var/lib/ds4-standin/rdma/sys and
  the verbs nodes in /dev/infiniband), for a pair in tensor mode.

The built-in sandbox (no prefix) has spark01..spark03, single Sparks, and spark04 + spark05, a pair
(PAIR_LINKS), on fixed ports 2201..2205, matching inventory/sandbox/hosts.yml. Molecule scenarios use a
prefix and random ports, so that their containers never collide with the sandbox or with each other.

Everything here is idempotent: `up` starts what is stopped, re-creates what is broken and leaves
what is running alone; `down` removes every container and network of the prefix.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import site_ca

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".sandbox"
STANDINS = ROOT / "tests" / "standins"
SSH_KEY = STATE / "ssh" / "id_ed25519"
# An ssh_config that names every running sandbox's hosts by container name (one file of entries a sandbox,
# in SSH_HOSTS): the scenarios' tests reach their hosts with it (testinfra's ssh backend), each host over one
# shared connection: 11 ms of CPU a command, where a `podman exec` costs 135 ms.
SSH_CONFIG = STATE / "ssh" / "config"
SSH_HOSTS = STATE / "ssh" / "hosts"

# What a Spark host brings before Ansible touches it: systemd and Python for Ansible, SSH to reach it,
# the engine's build prerequisites (so the engine role's package step is a no-op rather than a download),
# and the tools the roles and tests call.
PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-apt",
    "python3-requests",
    "openssh-server",
    "sudo",
    "iproute2",
    "procps",
    "ca-certificates",
    "curl",
    "logrotate",
    "git",
    "build-essential",
    # What ds4_service installs for the metrics: its package step finds it rather than downloading it,
    # as on a Spark whose image has it (the image keeps no apt lists to download from).
    "prometheus-node-exporter",
]
# Every host's Python loads it at start (see its docstring): the tasks' modules compile once, not per task.
ZIP_BYTECODE_CACHE = Path(__file__).with_name("zip_bytecode_cache.py")
IMAGE = (
    "localhost/ds4-sandbox-spark:"
    + hashlib.sha256(" ".join(PACKAGES).encode() + ZIP_BYTECODE_CACHE.read_bytes()).hexdigest()[:10]
)
HUB_PORT = 18080
STORAGE_PORT = 18081
# The hub and feed over HTTPS with the site CA's certificate (site_ca.py), as a site's mirror serves them.
HUB_TLS_PORT = 18443
STORAGE_TLS_PORT = 18444
# The engine repository over HTTPS with the same certificate: https://forge:18445/ds4.git.
GIT_TLS_PORT = 18445
TLS_DIR = STATE / "tls"
# Where a Spark's system store takes a site's CA (update-ca-certificates reads it).
SPARK_CA = "/usr/local/share/ca-certificates/ds4-sandbox-site-ca.crt"
GIT_HTTP_PORT = 18082
# The engine repository behind HTTP basic authentication (tests/standins/engine/git_http_auth.py).
GIT_AUTH_PORT = 18083
GIT_AUTH_USER, GIT_AUTH_PASSWORD = "builder", "S3cretTok3n"
PROXY_PORT = 8888
DEFAULT_HOSTS = ["spark01", "spark02", "spark03", "spark04", "spark05"]
FIXED_SSH_PORTS = {"spark01": 2201, "spark02": 2202, "spark03": 2203, "spark04": 2204, "spark05": 2205}
# The built-in sandbox's pair (inventory/sandbox/group_vars/all.yml, ds4_pairs pair01): its link and each
# member's address on it. Members load the engine firewall's nftables rules (NET_ADMIN).
PAIR_LINKS = {
    "spark04": {"link": "pair01", "address": "10.77.0.1/24"},
    "spark05": {"link": "pair01", "address": "10.77.0.2/24"},
}
# What DGX OS names a Spark's QSFP/ConnectX-7 port that a pair's direct link uses.
LINK_INTERFACE = "enP2p1s0f1np1"


def log(msg: str) -> None:
    print(f"sandbox: {msg}", file=sys.stderr, flush=True)


def podman(*args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], input=stdin, capture_output=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"sandbox: podman {' '.join(args[:3])} failed: {proc.stderr.decode().strip()}")
    return proc


class Names:
    """Container and network names of one sandbox; the built-in one has no prefix."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.network = f"{prefix}net" if prefix else "ds4-sandbox"
        self.forge = f"{prefix}forge" if prefix else "ds4-forge"
        self.inner = f"{prefix}inner" if prefix else "ds4-sandbox-inner"
        self.proxy = f"{prefix}proxy" if prefix else "ds4-proxy"

    def host(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def link(self, name: str) -> str:
        """The network of a pair's direct link NAME."""
        return f"{self.network}-link-{name}"

    def is_link(self, network: str) -> bool:
        return network.startswith(f"{self.network}-link-")


def ensure_image() -> None:
    if podman("image", "exists", IMAGE, check=False).returncode == 0:
        return
    log(f"building {IMAGE} with debootstrap (about a minute, once)")
    mirror = "http://deb.debian.org/debian"
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                mirror = line.split()[1]
                break
    rootfs = STATE / "rootfs"
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    rootfs.mkdir(parents=True)
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            "bookworm",
            str(rootfs),
            mirror,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # debootstrap can leave the chroot's /proc (and /sys) mounted; the image must hold neither.
    for mnt in ("proc", "sys"):
        target = rootfs / mnt
        if subprocess.run(["mountpoint", "-q", str(target)]).returncode == 0:
            subprocess.run(["umount", "-l", str(target)], check=True)
    cache = rootfs / "usr/lib/python3/dist-packages" / "ds4_sandbox_zip_bytecode_cache"
    cache.with_suffix(".py").write_bytes(ZIP_BYTECODE_CACHE.read_bytes())
    cache.with_suffix(".pth").write_text(f"import {cache.name}\n")
    # A shared machine-id would make every host the same journal; systemd makes one at first boot.
    subprocess.run(
        "rm -rf var/cache/apt/archives/*.deb var/lib/apt/lists/* && : > etc/machine-id",
        shell=True,
        cwd=rootfs,
        check=True,
    )
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--one-file-system", "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        [
            "podman", "import",
            "--change", 'CMD ["/sbin/init"]',
            "--change", "ENV container=podman",
            "--change", "STOPSIGNAL SIGRTMIN+3",
            "-", IMAGE,
        ],
        stdin=tar.stdout,
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    tar.wait()
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)


def ensure_ssh_key() -> None:
    if SSH_KEY.exists():
        return
    SSH_KEY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ds4-sandbox", "-f", str(SSH_KEY)], check=True
    )


def tree_digest(*dirs: Path) -> str:
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(p for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def ensure_forge_data() -> Path:
    """Build the engine repository and hub data the forge serves, again only when the stand-ins change."""
    data = STATE / "forge"
    digest = tree_digest(STANDINS / "engine", STANDINS / "hub")
    stamp = data / ".digest"
    if stamp.exists() and stamp.read_text() == digest:
        return data
    log("building the stand-in engine repository and hub data")
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir(parents=True)
    # Their reports go to stderr: stdout carries `up --json`'s answer.
    for script, out in (("engine/make_repo.py", "git"), ("hub/make_weights.py", "hub")):
        subprocess.run(
            [sys.executable, str(STANDINS / script), "--out", str(data / out)], check=True, stdout=sys.stderr
        )
    stamp.write_text(digest)
    return data


def container_state(name: str) -> str | None:
    proc = podman("container", "inspect", "--format", "{{.State.Status}}", name, check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def ensure_network(names: Names, isolate: bool = False) -> None:
    if podman("network", "exists", names.network, check=False).returncode != 0:
        # Netavark keeps apart only networks that are both isolated: the proxied Sparks' one is.
        podman("network", "create", *(["--opt", "isolate=true"] if isolate else []), names.network)


def ensure_link(names: Names, link: str) -> None:
    """A pair's direct link: a bridge of its own with no addresses handed out (its members' are static) and
    no way out (internal)."""
    if podman("network", "exists", names.link(link), check=False).returncode != 0:
        podman("network", "create", "--internal", "--ipam-driver", "none", names.link(link))


# The stand-in RDMA device of a pair member (tests/standins/rdma): its sysfs tree here, which the pair's
# ds4_rdma_sysfs_root and the stand-in engine's DS4_STANDIN_SYSFS name (inventory/sandbox/group_vars/
# pair01.yml), and its verbs nodes in the container's /dev. The link address is RoCE v2 GID index 3 until a
# test moves it.
RDMA_TOOL = "/usr/local/lib/ds4-standin-rdma/rdma_device.py"
RDMA_SYSFS = "/var/lib/ds4-standin/rdma/sys"
RDMA_GID_INDEX = "3"


def install_rdma(container: str, address: str) -> None:
    """Lay out the member's stand-in RDMA device for its link ADDRESS (A.B.C.D/24), again after every start:
    the container's /dev, which holds its nodes, is made anew at each."""
    exec_in(container, "mkdir", "-p", os.path.dirname(RDMA_TOOL))
    podman("cp", str(STANDINS / "rdma" / "rdma_device.py"), f"{container}:{RDMA_TOOL}")
    exec_in(
        container, "python3", RDMA_TOOL, "install", "--sysfs", RDMA_SYSFS, "--dev", "/dev",
        "--address", address.split("/")[0], "--gid-index", RDMA_GID_INDEX,
    )  # fmt: skip


def address_link(container: str, address: str) -> None:
    """Give the Spark's link interface its static ADDRESS (A.B.C.D/24), again after every start: from the
    host, in the container's network namespace, so the Spark needs no capability for it."""
    pid = podman("container", "inspect", "--format", "{{.State.Pid}}", container).stdout.decode().strip()
    for cmd in (["addr", "replace", address, "dev", LINK_INTERFACE], ["link", "set", LINK_INTERFACE, "up"]):
        subprocess.run(["nsenter", "-t", pid, "-n", "ip", *cmd], check=True, capture_output=True)


def ensure_forge(names: Names, data: Path) -> None:
    # A forge started before its data was rebuilt serves a repository that is gone: re-create it.
    digest = (data / ".digest").read_text()
    state = container_state(names.forge)
    serve = (
        "git daemon --reuseaddr --export-all --base-path=/srv/forge/git /srv/forge/git & "
        # Git's smart HTTP protocol (git http-backend as a CGI program): what a proxy carries to GitHub.
        "(mkdir -p /tmp/git-http/cgi-bin && cd /tmp/git-http && "
        "ln -sf /usr/lib/git-core/git-http-backend cgi-bin/git && "
        # The CGI server runs the backend as nobody, which git trusts with root's repository only when told.
        "HOME=/tmp GIT_PROJECT_ROOT=/srv/forge/git GIT_HTTP_EXPORT_ALL=1 "
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' "
        f"exec python3 -m http.server --cgi {GIT_HTTP_PORT} >/dev/null 2>&1) & "
        f"python3 /srv/standins/engine/git_http_auth.py --root /srv/forge/git --port {GIT_AUTH_PORT} "
        f"--user {GIT_AUTH_USER} --password {GIT_AUTH_PASSWORD} >/dev/null 2>&1 & "
        f"python3 /srv/standins/engine/git_http_auth.py --root /srv/forge/git --port {GIT_TLS_PORT} "
        "--tls-cert /srv/tls/server.pem --tls-key /srv/tls/server.key >/dev/null 2>&1 & "
        f"python3 /srv/standins/hub/hubstandin.py --data /srv/forge/hub --bind 0.0.0.0 "
        f"--port {HUB_TLS_PORT} --storage-port {STORAGE_TLS_PORT} "
        "--tls-cert /srv/tls/server.pem --tls-key /srv/tls/server.key >/dev/null 2>&1 & "
        f"exec python3 /srv/standins/hub/hubstandin.py --data /srv/forge/hub --bind 0.0.0.0 "
        f"--port {HUB_PORT} --storage-port {STORAGE_PORT}"
    )
    # A forge that serves other data, or serves it otherwise, is made anew.
    digest = hashlib.sha256(f"{digest}\n{serve}".encode()).hexdigest()
    if state == "running":
        label = podman(
            "container", "inspect", "--format", '{{index .Config.Labels "ds4.forge-data"}}', names.forge
        )
        if label.stdout.decode().strip() == digest:
            return
    if state is not None:
        podman("rm", "-f", "-t", "2", names.forge)
    podman(
        "run", "-d", "--name", names.forge, "--hostname", "forge", "--label", f"ds4.forge-data={digest}",
        "--network", names.network, "--network-alias", "forge",
        "-v", f"{STANDINS}:/srv/standins:ro", "-v", f"{data}:/srv/forge:ro", "-v", f"{TLS_DIR}:/srv/tls:ro",
        IMAGE, "sh", "-c", serve,
    )  # fmt: skip


def ensure_proxy(names: Names) -> None:
    """tinyproxy, from this machine's Debian archive, on the forge's network and the proxied Sparks' one."""
    if podman("network", "exists", names.inner, check=False).returncode != 0:
        # Isolated, as the forge's network is: no route between them, so the forge is out of reach but through
        # the proxy.
        podman("network", "create", "--opt", "isolate=true", names.inner)
    if container_state(names.proxy) == "running":
        return
    debs = STATE / "debs"
    if not list(debs.glob("tinyproxy-bin_*.deb")):
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "tinyproxy-bin"], cwd=debs, check=True, capture_output=True)
    (debs / "tinyproxy.conf").write_text(f"Port {PROXY_PORT}\nTimeout 600\nLogLevel Connect\nMaxClients 50\n")
    podman("rm", "-f", "-t", "2", names.proxy, check=False)
    podman(
        "run", "-d", "--name", names.proxy, "--hostname", "proxy",
        "--network", f"{names.network}:alias=proxy", "--network", f"{names.inner}:alias=proxy",
        "-v", f"{debs}:/srv/debs:ro", IMAGE,
        "sh", "-c",
        "dpkg -i /srv/debs/tinyproxy-bin_*.deb >/dev/null && exec tinyproxy -d -c /srv/debs/tinyproxy.conf",
    )  # fmt: skip


def exec_in(container: str, *cmd: str, stdin: bytes | None = None) -> str:
    return podman("exec", "-i", container, *cmd, stdin=stdin).stdout.decode()


def wait_booted(container: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = podman("exec", container, "systemctl", "is-system-running", check=False)
        if proc.stdout.decode().strip() in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise SystemExit(f"sandbox: {container} did not finish booting within {timeout:.0f} s")


def set_persona(container: str, persona: str) -> None:
    """Install the stand-in GPU/CUDA tools of a persona (gb10, h200, rtx-pro-6000, gb10-cuda12, none)."""
    podman("cp", str(STANDINS / "gpu"), f"{container}:/usr/local/lib/ds4-standin-gpu")
    exec_in(
        container, "python3", "/usr/local/lib/ds4-standin-gpu/install.py", "--root", "/", "--persona", persona
    )


# The distribution's haproxy.service bind-mounts /dev/log into HAProxy's chroot (BindReadOnlyPaths=), which
# these containers refuse (226/NAMESPACE); a real gateway keeps the unit as packaged. The gateway's
# configuration logs through standard output, so the sandbox loses no log line.
HAPROXY_DROPIN = b"[Service]\nBindReadOnlyPaths=\n"


def can_make_devices(container: str) -> bool:
    caps = podman("container", "inspect", "--format", "{{.EffectiveCaps}}", container, check=False)
    return "CAP_MKNOD" in caps.stdout.decode()


def ensure_spark(
    names: Names,
    host: str,
    ssh_port: int | None,
    persona: str,
    small_disk: str | None,
    cap_add: list[str] = (),
    behind_proxy: bool = False,
    pair_link: dict | None = None,
) -> None:
    container = names.host(host)
    state = container_state(container)
    created = False
    # Made before Sparks could create device nodes (ds4-nvidia-devices.service needs it): made anew.
    if state is not None and not can_make_devices(container):
        podman("rm", "-f", container)
        state = None
    if state in ("exited", "stopped", "created"):
        podman("start", container)
    elif state != "running":
        if state is not None:
            podman("rm", "-f", container)
        publish = f"127.0.0.1:{ssh_port}:22" if ssh_port else "127.0.0.1::22"
        extra = []
        if small_disk:
            # Plays a Spark whose weights filesystem is nearly full, for the preflight's disk refusal. Root's
            # and 0755, as a real mount is: a tmpfs is 1777 by default, which the weights directory's walk
            # (ds4_owned_dir) rightly refuses as a parent others could write.
            extra = [
                "--mount",
                f"type=tmpfs,destination=/var/lib/ds4,tmpfs-size={small_disk},tmpfs-mode=0755",
            ]
        # NET_ADMIN lets a host load nftables rules into its own network namespace (the engine firewall).
        extra += [f"--cap-add={cap}" for cap in cap_add]
        if pair_link:
            extra += ["--network", f"{names.link(pair_link['link'])}:interface_name={LINK_INTERFACE}"]
        # Reachable by its host name on the network, as a Spark is on a site's (the gateway's backends).
        podman(
            "run", "-d", "--name", container, "--hostname", host,
            "--network", f"{names.inner if behind_proxy else names.network}:alias={host}",
            # CAP_MKNOD, which Podman no longer grants by default: root on a Spark creates the GPU's
            # device nodes at boot (the stand-in nvidia-modprobe does here).
            "--systemd=always", "--cap-add=MKNOD", "-p", publish, *extra, IMAGE, "/sbin/init",
        )  # fmt: skip
        created = True
    wait_booted(container)
    if pair_link:
        address_link(container, pair_link["address"])
        install_rdma(container, pair_link["address"])
    # Every time: a host made from another checkout of this repository knows that checkout's key, and trusts
    # that checkout's site CA (the forge's HTTPS), in its system store as a site's own CA is.
    exec_in(container, "sh", "-c", "install -d -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys",
            stdin=SSH_KEY.with_suffix(".pub").read_bytes())  # fmt: skip
    exec_in(
        container, "sh", "-c",
        f"cat > {SPARK_CA}.new && if cmp -s {SPARK_CA}.new {SPARK_CA}; then rm {SPARK_CA}.new; "
        f"else mv {SPARK_CA}.new {SPARK_CA} && update-ca-certificates >/dev/null 2>&1; fi",
        stdin=(TLS_DIR / "ca.pem").read_bytes(),
    )  # fmt: skip
    if created:
        set_persona(container, persona)
        dropin = "/etc/systemd/system/haproxy.service.d"
        exec_in(
            container, "sh", "-c", f"mkdir -p {dropin} && cat > {dropin}/sandbox.conf", stdin=HAPROXY_DROPIN
        )


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)


def write_ssh_config(names: Names, hosts: list[dict]) -> None:
    """SSH_CONFIG, and this sandbox's entries for its HOSTS (up's instances) in SSH_HOSTS."""
    SSH_HOSTS.mkdir(parents=True, exist_ok=True)
    write_atomically(SSH_CONFIG, f"Include {SSH_HOSTS}/*.conf\n")
    entries = "".join(
        f"Host {host['container']}\n"
        f"  HostName {host['address']}\n  Port {host['port']}\n  User {host['user']}\n"
        f"  IdentityFile {host['identity_file']}\n  IdentitiesOnly yes\n"
        # The containers are re-created freely and share one throw-away host key.
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        "  ControlMaster auto\n  ControlPersist 120\n  ControlPath /tmp/ds4-sandbox-%C\n"
        for host in hosts
    )
    write_atomically(SSH_HOSTS / f"{names.network}.conf", entries)


def ssh_port_of(container: str) -> int:
    out = podman("port", container, "22/tcp").stdout.decode().strip()
    return int(out.rsplit(":", 1)[1])


def wait_forge(names: Names, from_container: str, timeout: float = 30, behind_proxy: bool = False) -> None:
    """The forge answers once both the hub and git daemon listen; the hosts need both."""
    deadline = time.monotonic() + timeout
    probe = (
        f"curl -fsS -o /dev/null http://forge:{HUB_PORT}/Entrpi/ds4-on-spark/main/LATEST && "
        f"curl -fsS -o /dev/null https://forge:{HUB_TLS_PORT}/Entrpi/ds4-on-spark/main/LATEST && "
        "git ls-remote git://forge/ds4.git >/dev/null && "
        f"git ls-remote https://forge:{GIT_TLS_PORT}/ds4.git | grep -q refs/tags/"
    )
    if behind_proxy:
        probe = (
            f"export http_proxy=http://proxy:{PROXY_PORT}; "
            f"curl -fsS -o /dev/null http://forge:{HUB_PORT}/Entrpi/ds4-on-spark/main/LATEST && "
            # A backend that fails still answers 200 with no refs: look for one.
            f"git ls-remote http://forge:{GIT_HTTP_PORT}/cgi-bin/git/ds4.git | grep -q refs/tags/"
        )
    while time.monotonic() < deadline:
        if podman("exec", from_container, "sh", "-c", probe, check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"sandbox: the forge ({names.forge}) did not answer within {timeout:.0f} s")


@contextlib.contextmanager
def build_lock():
    """Scenarios may come up side by side; only one may build the shared image and forge data."""
    STATE.mkdir(exist_ok=True)
    with open(STATE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up(args: argparse.Namespace) -> None:
    names = Names(args.prefix)
    personas = dict(p.split("=", 1) for p in args.persona)
    small = dict(p.split("=", 1) for p in args.small_disk)
    caps: dict[str, list[str]] = {}
    for entry in args.cap_add:
        host, cap = entry.split("=", 1)
        caps.setdefault(host, []).append(cap)
    if args.platforms:
        # Molecule's platform list: name plus the optional keys `persona`, `small_disk`, `cap_add`,
        # `behind_proxy` and `pair_link`.
        platforms = json.loads(args.platforms)
        args.hosts = [p["name"] for p in platforms]
        personas.update({p["name"]: p["persona"] for p in platforms if "persona" in p})
        small.update({p["name"]: p["small_disk"] for p in platforms if "small_disk" in p})
        caps.update({p["name"]: p["cap_add"] for p in platforms if "cap_add" in p})
        proxied = {p["name"] for p in platforms if p.get("behind_proxy")}
        links = {p["name"]: p["pair_link"] for p in platforms if p.get("pair_link")}
    else:
        proxied = set()
        links = {} if args.prefix else {h: PAIR_LINKS[h] for h in args.hosts if h in PAIR_LINKS}
        for host in links:
            caps.setdefault(host, []).append("NET_ADMIN")
    with build_lock():
        ensure_image()
        ensure_ssh_key()
        site_ca.ensure(TLS_DIR)
        data = ensure_forge_data()
    ensure_network(names, isolate=bool(proxied))
    ensure_forge(names, data)
    if proxied:
        ensure_proxy(names)
    for link in sorted({entry["link"] for entry in links.values()}):
        ensure_link(names, link)
    for host in args.hosts:
        port = None if args.prefix else FIXED_SSH_PORTS.get(host)
        ensure_spark(
            names,
            host,
            port,
            personas.get(host, "gb10"),
            small.get(host),
            caps.get(host, []),
            host in proxied,
            links.get(host),
        )
    wait_forge(names, names.host(args.hosts[0]), behind_proxy=args.hosts[0] in proxied)
    instances = [
        {
            "instance": host,
            "container": names.host(host),
            "address": "127.0.0.1",
            "port": ssh_port_of(names.host(host)),
            "user": "root",
            "identity_file": str(SSH_KEY),
        }
        for host in args.hosts
    ]
    write_ssh_config(names, instances)
    if args.json:
        print(json.dumps(instances))
    else:
        for i in instances:
            log(f"{i['instance']} is up: ssh -i {SSH_KEY} -p {i['port']} root@127.0.0.1")


def down(args: argparse.Namespace) -> None:
    names = Names(args.prefix)
    listed = podman("network", "ls", "--format", "{{.Name}}", check=False).stdout.decode().split()
    networks = [names.network, names.inner, *sorted(n for n in listed if names.is_link(n))]
    containers = set()
    for network in networks:
        proc = podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"network={network}", check=False)
        containers |= set(proc.stdout.decode().split())
    if containers:
        podman("rm", "-f", "-t", "2", *sorted(containers))
    for network in networks:
        if podman("network", "exists", network, check=False).returncode == 0:
            podman("network", "rm", "-f", network)
    (SSH_HOSTS / f"{names.network}.conf").unlink(missing_ok=True)
    log(f"removed {len(containers)} container(s) and the network {names.network}")


def persona(args: argparse.Namespace) -> None:
    set_persona(Names(args.prefix).host(args.host), args.name)


def show(args: argparse.Namespace) -> None:
    """What an operator looks at after the main job: the unit's status and one answer from the engine."""
    container = Names(args.prefix).host(args.host)
    status = podman("exec", container, "systemctl", "status", "ds4", "--no-pager", "--lines=5", check=False)
    print(status.stdout.decode())
    question = "What is the capital of France? Answer in one sentence."
    body = json.dumps(
        {"model": "deepseek-v4-flash", "max_tokens": 64, "messages": [{"role": "user", "content": question}]}
    )
    answer = podman(
        "exec", container, "curl", "-fsS", "--max-time", "60", "-H", "Content-Type: application/json",
        "-d", body, "http://127.0.0.1:8000/v1/chat/completions", check=False,
    )  # fmt: skip
    if answer.returncode != 0:
        raise SystemExit(
            f"sandbox: the engine on {args.host} did not answer: {answer.stderr.decode().strip()}"
        )
    reply = json.loads(answer.stdout)["choices"][0]["message"]["content"]
    print(f"{args.host} was asked: {question}\n{args.host} answered: {reply}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="", help="name prefix of a separate sandbox (Molecule scenarios)")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="bring the sandbox up (idempotent)")
    p_up.add_argument("--hosts", nargs="+", default=DEFAULT_HOSTS)
    p_up.add_argument("--persona", action="append", default=[], metavar="HOST=NAME")
    p_up.add_argument("--small-disk", action="append", default=[], metavar="HOST=SIZE")
    p_up.add_argument("--cap-add", action="append", default=[], metavar="HOST=CAPABILITY")
    p_up.add_argument("--platforms", metavar="JSON", help="hosts and their options as Molecule's platforms")
    p_up.add_argument("--json", action="store_true", help="print the instances as JSON")
    p_up.set_defaults(func=up)
    sub.add_parser("down", help="remove every container and the network").set_defaults(func=down)
    p_persona = sub.add_parser("persona", help="switch a host's stand-in GPU/CUDA persona")
    p_persona.add_argument("host")
    p_persona.add_argument("name")
    p_persona.set_defaults(func=persona)
    p_show = sub.add_parser("show", help="print a host's `systemctl status ds4` and one engine answer")
    p_show.add_argument("host")
    p_show.set_defaults(func=show)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
