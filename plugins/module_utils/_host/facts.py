"""What a host offers the ds4 engine, read without changing anything: GPU, CUDA, memory, disk, systemd,
the engine's port, and the traces a run of the shell installer (ds4-on-spark's install.sh) leaves behind.

gather_host_facts() gathers them all, running the tools through callables it is given, so the module
stays thin and every fact is testable without Ansible. Each concern has its own file: the GPU and CUDA
(_host.gpu), a git checkout (_engine.git_checkout), the engine's processes and port (_host.processes);
here, the disks, systemd and the weight files already on the host.
"""

from __future__ import annotations

import os
import pwd
import re
from typing import TYPE_CHECKING

from ansible_collections.ds4.fleet.plugins.module_utils._engine.git_checkout import read_git_checkout
from ansible_collections.ds4.fleet.plugins.module_utils._host.gpu import (
    GPU_QUERY_ARGS,
    HostFactsError,
    cuda_facts,
    gpu_facts,
    parse_meminfo_total,
)
from ansible_collections.ds4.fleet.plugins.module_utils._host.mounts import SYS_ROOT, mount_of, rotational
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import find_stray_servers, port_holder
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import part_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from ansible_collections.ds4.fleet.plugins.module_utils._engine.git_checkout import Run

__all__ = ["HostFactsError", "gather_host_facts"]


def disk_free(path: str) -> dict:
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


def parse_systemd_version(text: str) -> int | None:
    """`systemctl --version` -> 252; None when the text is not systemd's."""
    match = re.match(r"systemd (\d+)", text.strip())
    return int(match.group(1)) if match else None


def _read_text(path: str) -> str:
    with open(path, errors="replace") as handle:
        return handle.read()


def _files_in(directory: str, suffixes: str | tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, path) of the regular files in DIRECTORY (not below it) whose names end in SUFFIXES, by name."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    paths = ((name, os.path.join(directory, name)) for name in names if name.endswith(suffixes))
    return [(name, path) for name, path in paths if os.path.isfile(path)]


def find_gguf_files(directory: str) -> list[dict]:
    """`*.gguf` files in DIRECTORY (not below it), by name: [{'name', 'path', 'size'}]."""
    return [
        {"name": name, "path": path, "size": os.path.getsize(path)}
        for name, path in _files_in(directory, ".gguf")
    ]


def find_weight_files(directory: str) -> list[dict]:
    """Weights in DIRECTORY (not below it): finished `*.gguf` and interrupted `*.gguf.part` downloads,
    by name: [{'name', 'size'}]. What the preflight subtracts from the space the weights need."""
    suffixes = (".gguf", part_name(".gguf"))
    return [{"name": name, "size": os.path.getsize(path)} for name, path in _files_in(directory, suffixes)]


def installer_clone(home: str) -> str:
    """The shell installer's clone of the engine in HOME, where it builds ds4-server in place."""
    return os.path.join(home, "code", "ds4")


def invoking_home() -> str:
    """The home of the user who ran Ansible, also under become (SUDO_USER), else of the user this runs as:
    where the shell installer left its traces (its clone ~/code/ds4, built in place, and ~/gguf)."""
    user = os.environ.get("SUDO_USER")
    if user and user != "root":
        try:
            return pwd.getpwnam(user).pw_dir
        except KeyError:
            pass
    return pwd.getpwuid(os.getuid()).pw_dir


def gather_host_facts(
    run: Run,
    find_bin: Callable[[str, list[str]], str | None],
    *,
    home: str,
    gguf_dir: str,
    install_root: str,
    port: int,
    cuda_home: str,
    proc_root: str = "/proc",
    sys_root: str = SYS_ROOT,
) -> dict:
    """Every ds4_host_facts fact. RUN(argv) -> (rc, stdout, stderr) runs a command (in the C locale);
    FIND_BIN(name, opt_dirs) -> path or None finds one. Unreadable GPU output raises HostFactsError."""
    warnings: list[str] = []
    try:
        host_memory = parse_meminfo_total(_read_text(os.path.join(proc_root, "meminfo")))
    except (OSError, HostFactsError) as exc:
        host_memory = None
        warnings.append(f"host memory unknown: {exc}")

    smi = find_bin("nvidia-smi", [])
    smi_rc, out, err = run([smi, *GPU_QUERY_ARGS]) if smi else (None, "", "")
    gpu = gpu_facts(smi, smi_rc, out, err, host_memory)

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

    clone, clone_warnings = read_git_checkout(
        installer_clone(home), run, find_bin("git", []), find_bin("setpriv", [])
    )
    warnings.extend(clone_warnings)
    port_facts, port_warnings = port_holder(port, run, find_bin("ss", []), proc_root)
    warnings.extend(port_warnings)

    disk_gguf, disk_install = disk_free(gguf_dir), disk_free(install_root)
    disk_gguf["files"] = find_weight_files(gguf_dir)
    # The filesystem that holds it: a streamed family is refused from a network one (_host.model_fit).
    try:
        mountinfo = _read_text(os.path.join(proc_root, "self", "mountinfo"))
    except OSError:
        mountinfo = ""
    disk_gguf["mount"] = mount_of(os.path.realpath(disk_gguf["checked_path"]), mountinfo)
    if disk_gguf["mount"] is not None:
        # And whether its disk spins: a streamed family is refused from one too.
        disk_gguf["mount"]["rotational"] = rotational(disk_gguf["mount"]["device"], sys_root)
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
            "clone": clone,
            "gguf_dir": os.path.join(home, "gguf"),
            "gguf_files": find_gguf_files(os.path.join(home, "gguf")),
            "servers": find_stray_servers(proc_root),
        },
        "port": port_facts,
        "warnings": warnings,
    }
