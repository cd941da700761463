#!/bin/bash
# The routine check on a real Ubuntu GPU host (the lent H200 or H100: x86_64, nvcc 13.0, no systemd, no network),
# run as root from the root of a copy of the repository, whenever such a host is at hand:
#   1. `site.yml --tags ds4_preflight` on the host itself with the shipped defaults (no sandbox value): it
#      must end in a clear refusal that names the CPU architecture and the GPU, never a Python error.
#   2. The engine role building the REAL engine source for a GB10 (ds4_cuda_arch: sm_121) in three shapes
#      of its Makefile, each release twice: the second run must report changed=0.
#        v0.9.9   as bundled: `cuda-spark` passes an empty arch, so the role must fall back to
#                 `make cuda CUDA_ARCH=sm_121` before building and say why;
#        v0.9.11  a `cuda-spark` that names sm_121 (upstream's shape since): built with `make cuda-spark`;
#        v0.9.12  an empty-arch `cuda-spark` that adds the Spark cache flag (-DDS4_CUDA_SPARK_HBM_CACHE=1):
#                 the fallback again, saying the build lacks the Spark weight-read cache.
#      Each release's programs must carry sm_121 code only (cuobjdump --list-elf).
# Needs the wheels of ansible-core and resolvelib (WHEELS, default .whl/) and the engine source bundle
# (BUNDLE, default shared/engine-source/ds4-8d57664.bundle). Writes each run's log and summary.txt into
# $OUT and prints the summary; exits non-zero when an expectation failed.
set -u
OUT=${OUT:?set OUT to the folder the logs go to}
WHEELS=${WHEELS:-.whl}
BUNDLE=${BUNDLE:-shared/engine-source/ds4-8d57664.bundle}
[ -f "$BUNDLE" ] || { echo "no engine source bundle at $BUNDLE"; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$WHEELS"/*.whl || exit 2
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/collections ANSIBLE_ROLES_PATH=$PWD/roles
export ANSIBLE_NOCOLOR=1 ANSIBLE_CALLBACK_RESULT_FORMAT=json ANSIBLE_CALLBACK_FORMAT_PRETTY=false
PY=$(command -v python3)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
FAILED=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
expect() {  # WHAT CONDITION...: one line of the summary, and the exit status follows it
  local what=$1; shift
  if "$@"; then say "ok: $what"; else say "FAILED: $what"; FAILED=1; fi
}
say "ds4-fleet GPU host check, $(date -u +%Y-%m-%dT%H:%MZ), commit ${DS4_FLEET_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
say "$(ansible-playbook --version | head -1); $(. /etc/os-release && echo "$PRETTY_NAME"); $(uname -m)"
say "GPU: $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader)"
# What the refusal must name: this host's own, as the preflight reads them (the H200 or H100 lent: 9.0).
ARCH=$(uname -m)
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
GPU_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
say "nvcc: $("$NVCC" --version | tail -1)"

# 1. The preflight as a new user runs it: this host in the group sparks, every default as shipped.
cat > /tmp/ds4-inventory.yml <<EOF
sparks:
  hosts:
    gpuhost:
      ansible_connection: local
      ansible_python_interpreter: $PY
EOF
ansible-playbook -i /tmp/ds4-inventory.yml site.yml --tags ds4_preflight > "$OUT/preflight.log" 2>&1
rc=$?
say "site.yml --tags ds4_preflight: rc=$rc; $(grep -E '^gpuhost +:' "$OUT/preflight.log" | tr -s ' ')"
say "  said: $(grep -o 'CPU architecture [^;"]*' "$OUT/preflight.log" | head -1)"
say "  said: $(grep -o 'GPU compute capability [^;"]*' "$OUT/preflight.log" | head -1)"
expect "the preflight refuses the host" [ "$rc" -ne 0 ]
expect "the refusal names the CPU architecture $ARCH" grep -qF "CPU architecture is $ARCH;" "$OUT/preflight.log"
expect "the refusal names the GPU" grep -qF "GPU compute capability is $GPU_CAP ($GPU_NAME);" "$OUT/preflight.log"
expect "no Python or template error" \
  bash -c "! grep -q -E 'Traceback|NoneType|filter plugin .* failed|MODULE FAILURE' '$OUT/preflight.log'"

# 2. The engine source in three Makefile shapes, each a release of a bare clone.
G="git -c user.name=ds4-fleet -c user.email=ds4-fleet@invalid -c advice.detachedHead=false"
# As a fresh host each time: the role's record of each tag's commit goes too (the test releases are new
# commits on every run; on a host that ran this before, the role rightly refuses them as moved tags).
rm -rf /tmp/ds4.git /tmp/ds4-work /opt/ds4-gb10-* /var/log/ds4-gb10-* /var/lib/ds4-fleet/engine-tags.json
$G clone -q --bare "$BUNDLE" /tmp/ds4.git && $G --git-dir=/tmp/ds4.git tag v0.9.9 master || exit 2
$G clone -q /tmp/ds4.git /tmp/ds4-work || exit 2
shape() {  # TAG SED-EXPRESSION SUBJECT: one commit on master's source, its Makefile's cuda-spark recipe changed
  (cd /tmp/ds4-work && $G checkout -q v0.9.9 && sed -i "$2" Makefile && $G commit -qam "$3" && $G tag "$1" &&
    $G push -q origin "$1") || exit 2
}
RECIPE='ds4 ds4-server ds4-bench ds4-eval ds4-agent CUDA_ARCH='
shape v0.9.11 "s/^\(\t\$(MAKE) $RECIPE\)\$/\1sm_121/" "Name sm_121 in cuda-spark (ds4-fleet test release)"
shape v0.9.12 "s/^\(\t\$(MAKE) $RECIPE\)\$/\1 NVCCFLAGS=\"\$(NVCCFLAGS) -DDS4_CUDA_SPARK_HBM_CACHE=1\"/" \
  "Add the Spark cache flag to cuda-spark (ds4-fleet test release)"
for tag in v0.9.11 v0.9.12; do
  say "$tag cuda-spark: $($G --git-dir=/tmp/ds4.git show "$tag:Makefile" | grep -A1 '^cuda-spark:' | tail -1 | tr -s '\t ' ' ')"
done
# The role's build prerequisites come from dpkg; with no network a missing one cannot be installed.
MISSING=$(for p in build-essential git ca-certificates; do
  dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || echo "$p"; done)
SKIP=()
if [ -n "$MISSING" ]; then
  say "not installed (no network to install them; the build uses the tools present):" $MISSING
  SKIP=(-e '{"_ds4_engine_packages": []}')
fi
cat > /tmp/ds4-engine.yml <<'EOF'
- name: Build an engine release
  hosts: all
  gather_facts: false
  roles:
    - role: ds4.fleet.ds4_engine
EOF
build() {  # TAG LOG: the role's run of release TAG for a GB10 in a root of its own
  ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" -e ds4_release="$1" \
    -e ds4_cuda_arch=sm_121 -e ds4_root="/opt/ds4-gb10-$1" -e ds4_engine_build_log_dir="/var/log/ds4-gb10-$1" \
    -e ds4_engine_repo=file:///tmp/ds4.git "${SKIP[@]}" /tmp/ds4-engine.yml > "$OUT/$2.log" 2>&1
}
for tag in v0.9.9 v0.9.11 v0.9.12; do
  start=$(date +%s)
  build "$tag" "build-$tag"
  rc=$?
  say "== $tag: rc=$rc in $(( $(date +%s) - start )) s; $(grep -E '^localhost +:' "$OUT/build-$tag.log" | tr -s ' ')"
  stamp=/opt/ds4-gb10-$tag/releases/$tag/.ds4-build.json
  python3 - "$stamp" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    stamp = json.load(open(sys.argv[1]))
except OSError as exc:
    sys.exit(f"  no stamp: {exc}")
for key in ("make_target", "make_command", "make_target_reason", "sass_archs"):
    print(f"  stamp {key}: {json.dumps(stamp.get(key))}")
PY
  elf=$(for p in ds4 ds4-server ds4-bench; do "$CUOBJDUMP" --list-elf "/opt/ds4-gb10-$tag/releases/$tag/$p"; done)
  expect "$tag built" [ "$rc" -eq 0 ]
  expect "$tag carries sm_121 code only" bash -c "[ -n '$elf' ] && ! grep -v -q -E '\.sm_121a?\.cubin\$' <<< '$elf'"
  build "$tag" "again-$tag"
  again=$(grep -E '^localhost +:' "$OUT/again-$tag.log" | tr -s ' ')
  say "   again: $again"
  expect "$tag again changes nothing" grep -q -E 'changed=0 .*failed=0' <<< "$again"
done
stamp_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$@" 2>/dev/null; }
expect "v0.9.9 falls back to make cuda" \
  grep -q 'cuda CUDA_ARCH=sm_121' <<< "$(stamp_of /opt/ds4-gb10-v0.9.9/releases/v0.9.9/.ds4-build.json make_command)"
expect "v0.9.11 builds make cuda-spark" \
  grep -q 'cuda-spark' <<< "$(stamp_of /opt/ds4-gb10-v0.9.11/releases/v0.9.11/.ds4-build.json make_command)"
expect "v0.9.12 falls back and says the Spark cache is lacking" grep -q 'weight-read cache' \
  <<< "$(stamp_of /opt/ds4-gb10-v0.9.12/releases/v0.9.12/.ds4-build.json make_target_reason)"
say "result: $([ "$FAILED" -eq 0 ] && echo 'every expectation held' || echo 'an expectation FAILED')"
exit "$FAILED"
