#!/usr/bin/python
"""Gather what a host offers the ds4 engine, in one round trip, for the preflight role to judge.

The logic lives in module_utils/_host/facts.py; this file only wires Ansible's command runner and
executable search into it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_host_facts
short_description: Gather GPU, CUDA, memory, disk, systemd and shell-installer facts for ds4
description:
  - Reads the GPU (C(nvidia-smi)), the CUDA toolkit (C(nvcc --version), else the toolkit's C(version.json)),
    total memory, free disk space for the weights and the install, the systemd version, and what a run of
    the shell installer (ds4-on-spark C(install.sh)) left behind (its clone's commit read with C(git), run
    as the clone's owner through C(setpriv), never as root in another user's folder), and what listens on
    O(port) (C(ss)), and returns them as the fact C(ds4_host_facts).
  - A missing C(nvidia-smi) or C(nvcc) is a fact (C(ds4_host_facts.gpu.present=false),
    C(ds4_host_facts.cuda.present=false)), not a failure. The module fails only when C(nvidia-smi) prints
    something it cannot read.
  - On a GB10 (DGX Spark) C(nvidia-smi) reports no GPU memory; the GPU memory fact is then the host's total
    memory, flagged C(memory_unified=true).
  - Changes nothing. Commands run in the C locale.
version_added: 0.1.0
options:
  gguf_dir:
    description:
      - Where the weights will live; its filesystem's free space is reported (the folder need not exist).
    type: path
    default: /var/lib/ds4/gguf
  install_root:
    description: Where the engine will be built and installed; its filesystem's free space is reported.
    type: path
    default: /opt/ds4
  port:
    description: The TCP port the engine will serve on; who listens there already is reported.
    type: int
    default: 8000
  home:
    description:
      - Home folder to look in for shell-installer traces (C(~/code/ds4), C(~/gguf/*.gguf)).
      - Defaults to the home of the user who ran Ansible, also under C(become) (C(SUDO_USER)), else the
        home of the user the module runs as.
    type: path
  cuda_home:
    description: The CUDA toolkit's folder; its C(bin/nvcc) is preferred to one on C(PATH).
    type: path
    default: /usr/local/cuda
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.module.facts
"""

EXAMPLES = r"""
- name: Read what this host offers the engine
  ds4.fleet.ds4_host_facts:
    gguf_dir: "{{ ds4_gguf_dir }}"
    install_root: "{{ ds4_root }}"
    port: "{{ ds4_port }}"

- name: Refuse a host without a GPU the engine can be built for
  ansible.builtin.assert:
    that:
      - _host.gpu.present
      - _host.cuda.major is not none and _host.cuda.major >= 13
    fail_msg: "GPU: {{ _host.gpu.error or _host.gpu.name }}; CUDA: {{ _host.cuda.version }}"
  vars:
    _host: "{{ ansible_facts.ds4_host_facts }}"
"""

RETURN = r"""
ansible_facts:
  description: The fact C(ds4_host_facts).
  returned: always
  type: dict
  contains:
    ds4_host_facts:
      description: Host facts for ds4.
      type: dict
      contains:
        arch:
          description: Machine architecture (C(aarch64) on a Spark).
          type: str
        gpu:
          description:
            - C(present), C(nvidia_smi) (path or null), C(error) (why no GPU is listed, or null), C(count),
              C(devices) (each C(index), C(name), C(compute_cap), C(compute_cap_major), C(compute_cap_minor),
              C(driver_version), C(memory_total_mib) (null when not reported), C(memory_bytes),
              C(memory_unified), C(memory_source) (V(nvidia-smi) or V(meminfo))), and GPU 0's C(name),
              C(compute_cap), C(driver_version), C(memory_bytes), C(memory_unified), C(memory_source).
          type: dict
          sample:
            present: true
            name: NVIDIA GB10
            compute_cap: "12.1"
            memory_bytes: 128501256192
            memory_unified: true
        cuda:
          description:
            - C(present), C(version) (C(13.0)), C(major), C(minor), C(source) (V(nvcc) or V(version.json)),
              C(nvcc_path), C(nvcc_version) (C(13.0.88)), C(version_json_path), C(version_json_version).
          type: dict
        memory:
          description: C(total_bytes), the host's MemTotal.
          type: dict
        disk:
          description:
            - C(gguf_dir) and C(install_root), each C(path), C(checked_path) (nearest existing folder),
              C(free_bytes), C(device); and C(same_filesystem).
            - C(gguf_dir.files), the weights already there, each C(name) and C(size), finished C(*.gguf)
              files and interrupted C(*.gguf.part) downloads.
          type: dict
        systemd:
          description: C(present) and C(version) (an int, or null).
          type: dict
        shell_install:
          description:
            - Traces of the shell installer under O(home), C(home), C(clone) (C(path), C(present), C(commit),
              C(ref), C(tags)), C(gguf_dir), C(gguf_files) (each C(name), C(path), C(size)), and C(servers),
              the C(ds4-server) processes outside ds4.service (each C(pid), C(cmdline), C(cgroup)).
          type: dict
        port:
          description:
            - C(number), C(in_use) (null when C(ss) is missing or fails), C(pid) (null when C(ss) shows no
              process), C(comm), C(cmdline), C(in_service) (held from ds4.service).
          type: dict
        warnings:
          description:
            - Facts that could not be read and why (a garbled version.json, no C(git) to read a clone, say).
          type: list
          elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.facts import (  # noqa: E402
    HostFactsError,
    gather_host_facts,
    invoking_home,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "gguf_dir": {"type": "path", "default": "/var/lib/ds4/gguf"},
            "install_root": {"type": "path", "default": "/opt/ds4"},
            "port": {"type": "int", "default": 8000},
            "home": {"type": "path"},
            "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
        },
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}
    params = module.params

    def run(argv):
        return module.run_command(argv)

    def find_bin(name, opt_dirs):
        return module.get_bin_path(name, required=False, opt_dirs=opt_dirs)

    try:
        facts = gather_host_facts(
            run,
            find_bin,
            home=params["home"] or invoking_home(),
            gguf_dir=params["gguf_dir"],
            install_root=params["install_root"],
            port=params["port"],
            cuda_home=params["cuda_home"],
        )
    except HostFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"ds4_host_facts": facts})


if __name__ == "__main__":
    main()
