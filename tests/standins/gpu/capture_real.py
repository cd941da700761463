#!/usr/bin/env python3
"""Capture what the REAL GPU tools print, so the stand-ins and the host-facts tests copy reality.

Run on a machine with a real NVIDIA GPU and CUDA toolkit (it changes nothing there):

    python3 tests/standins/gpu/capture_real.py OUTDIR

Each capture NAME leaves NAME.stdout, NAME.stderr and NAME.rc in OUTDIR; commands.json records the
exact argv of each, smi_fields.json the header and value of every field `--help-query-gpu` names.
The H200 fixtures under tests/unit/fixtures/h200/ came from this script.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

# The query the shell installer runs, in the forms the real tool distinguishes.
BASE_QUERY = "--query-gpu=name,compute_cap,driver_version,memory.total"


def find_nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ["/usr/local/cuda/bin/nvcc", *sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"))]:
        if os.access(candidate, os.X_OK):
            return candidate
    return "nvcc"


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    recorded = {}
    # The C locale is what the product runs the tools under (module.run_command with LC_ALL=C).
    env = dict(os.environ, LC_ALL="C")

    def capture(name, argv, shell=False):
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, shell=shell, env=env, timeout=60)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except FileNotFoundError as exc:
            out, err, rc = b"", str(exc).encode(), 127
        except subprocess.TimeoutExpired:
            out, err, rc = b"", b"timed out after 60 s", 124
        for suffix, data in ((".stdout", out), (".stderr", err), (".rc", f"{rc}\n".encode())):
            with open(os.path.join(outdir, name + suffix), "wb") as handle:
                handle.write(data)
        recorded[name] = {"argv": argv, "rc": rc, "seconds": round(time.monotonic() - started, 3)}
        return out, rc

    smi = "nvidia-smi"
    capture("smi_query_noheader", [smi, BASE_QUERY, "--format=csv,noheader"])
    capture("smi_query_noheader_nounits", [smi, BASE_QUERY, "--format=csv,noheader,nounits"])
    capture("smi_query_header", [smi, BASE_QUERY, "--format=csv"])
    capture("smi_query_header_nounits", [smi, BASE_QUERY, "--format=csv,nounits"])
    capture("smi_query_nounits_noheader_order", [smi, BASE_QUERY, "--format=csv,nounits,noheader"])
    capture(
        "smi_facts_query",
        [
            smi,
            "--query-gpu=index,name,compute_cap,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ],
    )
    capture(
        "smi_memory_query",
        [smi, "--query-gpu=index,name,memory.total,memory.used,memory.free", "--format=csv"],
    )
    capture(
        "smi_memory_query_nounits",
        [smi, "--query-gpu=index,name,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"],
    )
    capture(
        "smi_ids_query",
        [smi, "--query-gpu=index,uuid,pci.bus_id,gpu_name,gpu_uuid,gpu_bus_id,count", "--format=csv"],
    )
    capture("smi_list", [smi, "-L"])
    capture("smi_list_long", [smi, "--list-gpus"])
    capture("smi_version", [smi, "--version"])
    capture("smi_full", [smi])
    capture("smi_invalid_field", [smi, "--query-gpu=name,bogus_field", "--format=csv"])
    capture("smi_invalid_field_noheader", [smi, "--query-gpu=bogus_field,name", "--format=csv,noheader"])
    capture("smi_no_format", [smi, "--query-gpu=name"])
    capture("smi_bad_format", [smi, "--query-gpu=name", "--format=json"])
    capture("smi_spaces", [smi, "--query-gpu=name, compute_cap", "--format=csv"])
    capture("smi_uppercase", [smi, "--query-gpu=NAME", "--format=csv"])
    capture("smi_empty_query", [smi, "--query-gpu=", "--format=csv"])
    capture("smi_trailing_comma", [smi, "--query-gpu=name,", "--format=csv"])
    capture("smi_unknown_option", [smi, "--bogus"])
    capture("smi_id0", [smi, "-i", "0", "--query-gpu=name", "--format=csv,noheader"])
    capture("smi_id_missing", [smi, "-i", "7", "--query-gpu=name", "--format=csv,noheader"])
    help_out, _ = capture("smi_help_query_gpu", [smi, "--help-query-gpu"])

    # Every field the help names (aliases too), one query each: the header and value of each are what
    # the stand-in needs to answer any comma list. One query of all of them would stop at the first
    # field the driver refuses, telling nothing of the rest.
    fields = []
    for line in help_out.decode(errors="replace").splitlines():
        # Field lines are only quoted names joined by "or"; descriptions may also start with a quote.
        if re.fullmatch(r'"[\w.]+"( or "[\w.]+")*', line.strip()):
            fields.extend(f for f in re.findall(r'"([^"]+)"', line) if f not in fields)
    table = {}
    for index, field in enumerate(fields):
        name = f"smi_field_{index:03d}"
        out, rc = capture(name, [smi, f"--query-gpu={field}", "--format=csv"])
        lines = out.decode(errors="replace").splitlines()
        table[field] = {"rc": rc, "header": lines[0] if lines else "", "value": "\n".join(lines[1:])}
        for suffix in (".stdout", ".stderr", ".rc"):
            os.remove(os.path.join(outdir, name + suffix))
        del recorded[name]
    with open(os.path.join(outdir, "smi_fields.json"), "w") as handle:
        json.dump(table, handle, indent=1)
        handle.write("\n")

    nvcc = find_nvcc()
    capture("nvcc_version", [nvcc, "--version"])
    capture(
        "nvcc_path", f"command -v nvcc; echo {nvcc}; ls -la /usr/local/ /usr/local/cuda*/ 2>&1", shell=True
    )
    capture("cuda_version_json", ["cat", "/usr/local/cuda/version.json"])
    capture("cuda_version_json_any", "ls /usr/local/cuda*/version.json 2>&1", shell=True)
    capture("uname_m", ["uname", "-m"])
    capture("meminfo_head", "head -n 5 /proc/meminfo", shell=True)
    capture("os_release", ["cat", "/etc/os-release"])
    capture("systemctl_version", "systemctl --version | head -1", shell=True)
    capture("df_root", ["df", "-B1", "--output=target,avail", "/"])
    capture("proc_self_cgroup", ["cat", "/proc/self/cgroup"])
    capture("proc_net_tcp_head", "head -n 3 /proc/net/tcp /proc/net/tcp6", shell=True)

    with open(os.path.join(outdir, "commands.json"), "w") as handle:
        json.dump(recorded, handle, indent=1, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
