#!/usr/bin/env bash
# Prepares this machine to run sandbox Sparks: rootful Podman plus the two host fixes that
# ../shared/docs/test-hosts.md found necessary on these VMs. Safe to run again; needs root.
set -euo pipefail

need_pkgs=()
for p in podman debootstrap python3-venv openssh-client git; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
  echo "prepare-host: installing ${need_pkgs[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# crun refuses hybrid cgroups while cgroup2 still owns a controller: mount each such controller
# as a v1 hierarchy so that cgroup2 owns none.
unified=/sys/fs/cgroup/unified/cgroup.controllers
if [[ -r $unified ]]; then
  for c in $(cat "$unified"); do
    mkdir -p "/sys/fs/cgroup/$c"
    mountpoint -q "/sys/fs/cgroup/$c" || mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
  done
fi

# root here lacks CAP_SYS_RESOURCE, so Podman's default rlimits (above the hard limits) fail:
# pin the container defaults to this machine's hard limits.
conf=/etc/containers/containers.conf
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
want="default_ulimits = [\"nofile=${nofile}:${nofile}\", \"nproc=${nproc}:${nproc}\"]"
if ! grep -qxF "$want" "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  # Keep whatever else is configured; replace only our key under [containers].
  if [[ -f $conf ]]; then sed -i '/^default_ulimits/d' "$conf"; fi
  grep -q '^\[containers\]' "$conf" 2>/dev/null || printf '[containers]\n' >>"$conf"
  sed -i "/^\[containers\]/a $want" "$conf"
  echo "prepare-host: set $want in $conf"
fi

# ansible-navigator runs an execution environment only where /dev/mqueue exists (it mounts it into the
# container for Python's multiprocessing); this kind of machine's /dev has none.
[[ -d /dev/mqueue ]] || mkdir -p /dev/mqueue
