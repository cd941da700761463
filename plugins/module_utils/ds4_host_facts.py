"""What a host offers the ds4 engine, read without changing anything: GPU, CUDA, memory, disk, systemd,
and the traces a run of the shell installer (ds4-on-spark's install.sh) leaves behind.

The parsers are pure functions over the text the tools print; gather_host_facts() runs the tools
through callables it is given, so the module stays thin and every fact is testable without Ansible.
Formats were read off real tools: an H200 (driver 580.159.04, CUDA 13.0) and public reports of DGX
Spark (GB10) units, whose nvidia-smi reports no memory of its own (see tests/unit/fixtures/).
"""

import json
import os
import pwd
import re
import zlib

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_weight_files import part_name

# The one nvidia-smi query the facts need, in the form that is easiest to parse.
GPU_QUERY_FIELDS = ("index", "name", "compute_cap", "driver_version", "memory.total")
GPU_QUERY_ARGS = ("--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits")

# What nvidia-smi prints for a value a part does not report: a GB10 prints `[N/A]` for memory.total;
# older drivers and other tools word it `Not Supported`.
NOT_REPORTED = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]"})

# The unit the engine runs under; an engine process outside it is a leftover of the shell installer.
SERVICE_UNIT = "ds4.service"
SERVER_NAME = "ds4-server"
TCP_LISTEN = "0A"
MIB = 1024 * 1024


class HostFactsError(ValueError):
    """A tool printed something these parsers cannot read; the message quotes it."""


def _not_reported(value):
    return value.strip().lower() in NOT_REPORTED


def _reported(value, pattern, problem):
    """The match of a value nvidia-smi reported; None when it did not; HostFactsError(problem) otherwise."""
    if _not_reported(value):
        return None
    match = re.fullmatch(pattern, value.strip())
    if not match:
        raise HostFactsError(problem)
    return match


def parse_compute_cap(value):
    """'12.1' -> (12, 1); None when not reported. Anything else raises HostFactsError."""
    match = _reported(
        value, r"(\d{1,2})\.(\d)", f"compute capability {value!r} is not of the form MAJOR.MINOR"
    )
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def parse_mib(value):
    """nvidia-smi memory, with or without its unit ('143771', '143771 MiB') -> int; None if not reported."""
    match = _reported(value, r"(\d+)(?: MiB)?", f"memory value {value!r} is not a number of MiB")
    return None if match is None else int(match.group(1))


def parse_gpu_query(text):
    """Parse `nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total
    --format=csv,noheader,nounits`, one GPU a line, into a list of dicts."""
    devices = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < len(GPU_QUERY_FIELDS) or not parts[0].isdigit():
            raise HostFactsError(
                f"nvidia-smi output line {number} is not 'index, name, compute_cap, driver_version, "
                f"memory.total': {line!r}"
            )
        # A product name holding a comma would split in two: the last three fields are fixed.
        name = ", ".join(parts[1:-3])
        try:
            cap = parse_compute_cap(parts[-3])
            memory_mib = parse_mib(parts[-1])
        except HostFactsError as exc:
            raise HostFactsError(f"nvidia-smi output line {number} ({line!r}): {exc}") from None
        devices.append(
            {
                "index": int(parts[0]),
                "name": name,
                "compute_cap": None if cap is None else f"{cap[0]}.{cap[1]}",
                "compute_cap_major": None if cap is None else cap[0],
                "compute_cap_minor": None if cap is None else cap[1],
                "driver_version": None if _not_reported(parts[-2]) else parts[-2],
                "memory_total_mib": memory_mib,
            }
        )
    return devices


def parse_nvcc_version(text):
    """`nvcc --version` -> {'version': '13.0', 'major': 13, 'minor': 0, 'build': '13.0.88'}."""
    match = re.search(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)*)", text)
    if not match:
        raise HostFactsError(f"nvcc --version printed no 'release X.Y, VX.Y.Z' line: {text.strip()[:200]!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    return {"version": f"{major}.{minor}", "major": major, "minor": minor, "build": match.group(3)}


def parse_cuda_version_json(text):
    """The toolkit's version.json -> {'version': '13.0', 'major': 13, 'minor': 0, 'full': '13.0.2'}."""
    try:
        full = json.loads(text)["cuda"]["version"]
    except (ValueError, KeyError, TypeError):
        raise HostFactsError(f"version.json has no cuda.version: {text.strip()[:200]!r}") from None
    match = re.match(r"(\d+)\.(\d+)", str(full))
    if not match:
        raise HostFactsError(f"version.json's cuda.version {full!r} is not of the form X.Y[.Z]")
    major, minor = int(match.group(1)), int(match.group(2))
    return {"version": f"{major}.{minor}", "major": major, "minor": minor, "full": str(full)}


def cuda_facts(nvcc_path, nvcc_text, version_json_path, version_json_text):
    """Which CUDA toolkit the host has, from nvcc (it is what builds the engine) or else version.json.

    Either source may be missing (pass None). Returns (facts, warnings).
    """
    warnings = []
    nvcc = version_json = None
    if nvcc_text is not None:
        try:
            nvcc = parse_nvcc_version(nvcc_text)
        except HostFactsError as exc:
            warnings.append(str(exc))
    if version_json_text is not None:
        try:
            version_json = parse_cuda_version_json(version_json_text)
        except HostFactsError as exc:
            warnings.append(f"{version_json_path}: {exc}")
    if nvcc:
        chosen, source = nvcc, "nvcc"
    elif version_json:
        chosen, source = version_json, "version.json"
    else:
        chosen, source = None, None
    if nvcc and version_json and nvcc["version"] != version_json["version"]:
        warnings.append(
            f"nvcc ({nvcc_path}) is CUDA {nvcc['version']} but {version_json_path} says "
            f"{version_json['full']}; the facts follow nvcc"
        )
    facts = {
        "present": chosen is not None,
        "version": chosen and chosen["version"],
        "major": chosen and chosen["major"],
        "minor": chosen and chosen["minor"],
        "source": source,
        "nvcc_path": nvcc_path,
        "nvcc_version": nvcc and nvcc["build"],
        "version_json_path": version_json_path if version_json_text is not None else None,
        "version_json_version": version_json and version_json["full"],
    }
    return facts, warnings


def parse_meminfo_total(text):
    """/proc/meminfo -> MemTotal in bytes."""
    match = re.search(r"^MemTotal:\s+(\d+) kB$", text, re.MULTILINE)
    if not match:
        raise HostFactsError("/proc/meminfo has no 'MemTotal: N kB' line")
    return int(match.group(1)) * 1024


def gpu_memory(device, host_memory_bytes):
    """The memory the engine can count on for DEVICE: its own, or on a unified-memory part (GB10, which
    reports none) the host's total, flagged as unified."""
    if device["memory_total_mib"] is not None:
        return {
            "memory_bytes": device["memory_total_mib"] * MIB,
            "memory_unified": False,
            "memory_source": "nvidia-smi",
        }
    return {"memory_bytes": host_memory_bytes, "memory_unified": True, "memory_source": "meminfo"}


def gpu_facts(nvidia_smi_path, rc, stdout, stderr, host_memory_bytes):
    """GPU facts from the query's result; a missing tool or a failing driver is a fact, not an error.
    Output that cannot be read raises HostFactsError: no decision should rest on a guess about the GPU."""
    facts = {
        "present": False,
        "nvidia_smi": nvidia_smi_path,
        "error": None,
        "count": 0,
        "devices": [],
        "name": None,
        "compute_cap": None,
        "driver_version": None,
        "memory_bytes": None,
        "memory_unified": False,
        "memory_source": None,
    }
    if nvidia_smi_path is None:
        facts["error"] = "nvidia-smi not found"
        return facts
    if rc != 0:
        # nvidia-smi prints its own failures (no driver, no device) on stdout.
        facts["error"] = f"nvidia-smi exited {rc}: {(stdout.strip() or stderr.strip())[:300]}"
        return facts
    devices = [dict(device, **gpu_memory(device, host_memory_bytes)) for device in parse_gpu_query(stdout)]
    facts["devices"] = devices
    facts["count"] = len(devices)
    if not devices:
        facts["error"] = "nvidia-smi listed no GPU"
    else:
        first = devices[0]
        facts["present"] = True
        for key in (
            "name",
            "compute_cap",
            "driver_version",
            "memory_bytes",
            "memory_unified",
            "memory_source",
        ):
            facts[key] = first[key]
    return facts


def disk_free(path):
    """Free bytes (for an unprivileged writer, as df's Avail) of the filesystem that will hold PATH: the
    nearest existing ancestor's, since the folder itself may not exist before the install."""
    checked = os.path.abspath(path)
    while not os.path.exists(checked):
        checked = os.path.dirname(checked)
    stats = os.statvfs(checked)
    return {
        "path": path,
        "checked_path": checked,
        "free_bytes": stats.f_bavail * stats.f_frsize,
        "device": os.stat(checked).st_dev,
    }


def parse_systemd_version(text):
    """`systemctl --version` -> 252; None when the text is not systemd's."""
    match = re.match(r"systemd (\d+)", text.strip())
    return int(match.group(1)) if match else None


def _read_text(path):
    with open(path, errors="replace") as handle:
        return handle.read()


def _packed_refs(git_dir):
    """packed-refs -> {ref: sha} and {ref: peeled sha} (the commit an annotated tag points at)."""
    refs, peeled = {}, {}
    try:
        lines = _read_text(os.path.join(git_dir, "packed-refs")).splitlines()
    except OSError:
        return refs, peeled
    last = None
    for line in lines:
        if line.startswith("^") and last:
            peeled[last] = line[1:].strip()
        elif line and not line.startswith("#"):
            sha, _, last = line.partition(" ")
            refs[last] = sha
    return refs, peeled


def _loose_tag_target(git_dir, sha):
    """The object an annotated tag object points at, read from a loose object; None when packed."""
    try:
        with open(os.path.join(git_dir, "objects", sha[:2], sha[2:]), "rb") as handle:
            raw = zlib.decompress(handle.read())
    except (OSError, zlib.error):
        return None
    header, _, body = raw.partition(b"\0")
    if not header.startswith(b"tag "):
        return None
    match = re.match(rb"object ([0-9a-f]{40})", body)
    return match.group(1).decode() if match else None


def read_git_clone(path):
    """What a clone at PATH is checked out at, read from .git without running git:
    {'path', 'present', 'commit', 'ref', 'tags'} (tags: those naming the checked-out commit)."""
    facts = {"path": path, "present": False, "commit": None, "ref": None, "tags": []}
    git_dir = os.path.join(path, ".git")
    if os.path.isfile(git_dir):
        # A worktree or submodule: .git is a file naming the real folder.
        pointer = _read_text(git_dir).strip()
        if pointer.startswith("gitdir:"):
            git_dir = os.path.join(path, pointer[len("gitdir:") :].strip())
    try:
        head = _read_text(os.path.join(git_dir, "HEAD")).strip()
    except OSError:
        return facts
    facts["present"] = True
    refs, peeled = _packed_refs(git_dir)
    if head.startswith("ref:"):
        facts["ref"] = head[len("ref:") :].strip()
        try:
            facts["commit"] = _read_text(os.path.join(git_dir, facts["ref"])).strip()
        except OSError:
            facts["commit"] = refs.get(facts["ref"])
    else:
        facts["commit"] = head
    if facts["commit"]:
        tag_dir = os.path.join(git_dir, "refs", "tags")
        for root, _dirs, files in os.walk(tag_dir):
            for name in files:
                ref = "refs/" + os.path.relpath(os.path.join(root, name), os.path.join(git_dir, "refs"))
                refs[ref] = _read_text(os.path.join(root, name)).strip()
        for ref, sha in sorted(refs.items()):
            if not ref.startswith("refs/tags/"):
                continue
            target = peeled.get(ref) or (sha if sha == facts["commit"] else _loose_tag_target(git_dir, sha))
            if target == facts["commit"]:
                facts["tags"].append(ref[len("refs/tags/") :])
    return facts


def _files_in(directory, suffixes):
    """(name, path) of the regular files in DIRECTORY (not below it) whose names end in SUFFIXES, by name."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    paths = ((name, os.path.join(directory, name)) for name in names if name.endswith(suffixes))
    return [(name, path) for name, path in paths if os.path.isfile(path)]


def find_gguf_files(directory):
    """`*.gguf` files in DIRECTORY (not below it), by name: [{'name', 'path', 'size'}]."""
    return [
        {"name": name, "path": path, "size": os.path.getsize(path)}
        for name, path in _files_in(directory, ".gguf")
    ]


def find_weight_files(directory):
    """Weights in DIRECTORY (not below it): finished `*.gguf` and interrupted `*.gguf.part` downloads,
    by name: [{'name', 'size'}]. What the preflight subtracts from the space the weights need."""
    suffixes = (".gguf", part_name(".gguf"))
    return [{"name": name, "size": os.path.getsize(path)} for name, path in _files_in(directory, suffixes)]


def installer_clone(home):
    """The shell installer's clone of the engine in HOME, where it builds ds4-server in place."""
    return os.path.join(home, "code", "ds4")


def invoking_home():
    """The home of the user who ran Ansible, also under become (SUDO_USER), else of the user this runs as:
    where the shell installer left its traces (its clone ~/code/ds4, built in place, and ~/gguf)."""
    user = os.environ.get("SUDO_USER")
    if user and user != "root":
        try:
            return pwd.getpwnam(user).pw_dir
        except KeyError:
            pass
    return pwd.getpwuid(os.getuid()).pw_dir


def _process(proc_root, pid):
    """{'pid', 'comm', 'cmdline', 'cgroup', 'in_service'} of one process; None once it is gone."""
    base = os.path.join(proc_root, str(pid))
    try:
        comm = _read_text(os.path.join(base, "comm")).strip()
        with open(os.path.join(base, "cmdline"), "rb") as handle:
            cmdline = [arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg]
        cgroup = _read_text(os.path.join(base, "cgroup")).strip()
    except OSError:
        return None
    # cgroup v2 has one line `0::/system.slice/ds4.service`; v1 one line per hierarchy.
    in_service = any(line.rsplit("/", 1)[-1] == SERVICE_UNIT for line in cgroup.splitlines())
    return {"pid": pid, "comm": comm, "cmdline": cmdline, "cgroup": cgroup, "in_service": in_service}


def _pids(proc_root):
    try:
        return sorted(int(entry) for entry in os.listdir(proc_root) if entry.isdigit())
    except OSError:
        return []


# The installer's programs: the server, and ds4-serve, the shell script that starts it; and the
# interpreters that may run either as a script (`sh ds4-serve`, a Python stand-in's `python3 ds4-server`).
SERVER_PROGRAMS = (SERVER_NAME, "ds4-serve")
_INTERPRETER_RE = re.compile(r"^(python3[.0-9]*|sh|bash|dash)$")


def interpreter_script(program, cmdline):
    """The script an interpreter runs (its first argument after its own options), when PROGRAM (a program's
    base name) is one of the interpreters a server may run under; None otherwise, or when it runs code
    given in its arguments (-c, -m) rather than a file."""
    if not _INTERPRETER_RE.match(program):
        return None
    for arg in cmdline[1:]:
        if arg in ("-c", "-m"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def runs_server(comm, cmdline):
    """Whether a process is ds4-server or ds4-serve: by its name, its program, or the script an
    interpreter runs (the first argument after the interpreter's own options)."""
    if comm in SERVER_PROGRAMS:
        return True
    if not cmdline:
        return False
    program = os.path.basename(cmdline[0])
    if program in SERVER_PROGRAMS:
        return True
    script = interpreter_script(program, cmdline)
    return script is not None and os.path.basename(script) in SERVER_PROGRAMS


def find_stray_servers(proc_root="/proc"):
    """ds4-server processes that are not ds4.service's: what `nohup ds4-serve &` of the installer left."""
    stray = []
    for pid in _pids(proc_root):
        process = _process(proc_root, pid)
        if process is None or process["in_service"]:
            continue
        if runs_server(process["comm"], process["cmdline"]):
            stray.append({key: process[key] for key in ("pid", "cmdline", "cgroup")})
    return stray


def parse_proc_net_tcp(text):
    """/proc/net/tcp or tcp6 -> [{'port', 'state', 'inode'}] (state in the kernel's hex, 0A = LISTEN)."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        sockets.append(
            {"port": int(fields[1].rsplit(":", 1)[1], 16), "state": fields[3], "inode": int(fields[9])}
        )
    return sockets


def _fd_links(fd_dir):
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    links = []
    for fd in fds:
        # An fd can close between listing and reading (listdir's own does): skip it, not the process.
        try:
            links.append(os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            continue
    return links


def port_holder(port, proc_root="/proc"):
    """Who listens on TCP PORT: {'number', 'in_use', 'pid', 'comm', 'cmdline', 'in_service'}.
    pid is None when the socket's owner cannot be seen (another user's process, read without root)."""
    facts = {"number": port, "in_use": False, "pid": None, "comm": None, "cmdline": [], "in_service": False}
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            text = _read_text(os.path.join(proc_root, "net", table))
        except OSError:
            continue
        inodes.update(
            s["inode"] for s in parse_proc_net_tcp(text) if s["port"] == port and s["state"] == TCP_LISTEN
        )
    if not inodes:
        return facts
    facts["in_use"] = True
    targets = {f"socket:[{inode}]" for inode in inodes}
    for pid in _pids(proc_root):
        if targets.intersection(_fd_links(os.path.join(proc_root, str(pid), "fd"))):
            process = _process(proc_root, pid)
            if process:
                facts.update({key: process[key] for key in ("pid", "comm", "cmdline", "in_service")})
                break
    return facts


def gather_host_facts(run, find_bin, *, home, gguf_dir, install_root, port, cuda_home, proc_root="/proc"):
    """Every ds4_host_facts fact. RUN(argv) -> (rc, stdout, stderr) runs a command (in the C locale);
    FIND_BIN(name, opt_dirs) -> path or None finds one. Unreadable GPU output raises HostFactsError."""
    warnings = []
    try:
        host_memory = parse_meminfo_total(_read_text(os.path.join(proc_root, "meminfo")))
    except (OSError, HostFactsError) as exc:
        host_memory = None
        warnings.append(f"host memory unknown: {exc}")

    smi = find_bin("nvidia-smi", [])
    rc, out, err = run([smi, *GPU_QUERY_ARGS]) if smi else (None, "", "")
    gpu = gpu_facts(smi, rc, out, err, host_memory)

    nvcc = find_bin("nvcc", [os.path.join(cuda_home, "bin")])
    nvcc_text = None
    if nvcc:
        rc, out, err = run([nvcc, "--version"])
        nvcc_text = out if rc == 0 else None
        if rc != 0:
            warnings.append(f"{nvcc} --version exited {rc}: {(err or out).strip()[:200]}")
    version_json_path = os.path.join(cuda_home, "version.json")
    try:
        version_json_text = _read_text(version_json_path)
    except OSError:
        version_json_text = None
    cuda, cuda_warnings = cuda_facts(nvcc, nvcc_text, version_json_path, version_json_text)
    warnings.extend(cuda_warnings)

    systemctl = find_bin("systemctl", [])
    systemd_version = None
    if systemctl:
        rc, out, _err = run([systemctl, "--version"])
        systemd_version = parse_systemd_version(out) if rc == 0 else None

    disk_gguf, disk_install = disk_free(gguf_dir), disk_free(install_root)
    disk_gguf["files"] = find_weight_files(gguf_dir)
    return {
        "arch": os.uname().machine,
        "gpu": gpu,
        "cuda": cuda,
        "memory": {"total_bytes": host_memory},
        "disk": {
            "gguf_dir": disk_gguf,
            "install_root": disk_install,
            "same_filesystem": disk_gguf["device"] == disk_install["device"],
        },
        "systemd": {"present": systemd_version is not None, "version": systemd_version},
        "shell_install": {
            "home": home,
            "clone": read_git_clone(installer_clone(home)),
            "gguf_dir": os.path.join(home, "gguf"),
            "gguf_files": find_gguf_files(os.path.join(home, "gguf")),
            "servers": find_stray_servers(proc_root),
        },
        "port": port_holder(port, proc_root),
        "warnings": warnings,
    }
