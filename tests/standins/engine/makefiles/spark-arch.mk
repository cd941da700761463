# STAND-IN for the ds4 engine's Makefile (test infrastructure of ds4-fleet, NOT the real engine), of the
# shape of the fork's releases from v0.5.5 on: `make cuda-spark` names the GB10's arch-specific sm_121a and
# compiles the Spark weight-read cache; `make cuda CUDA_ARCH=sm_NNN` builds for that arch without it and
# refuses an empty one (a release of flavour drops-arch drops the arch it was given). The CUDA compiler
# must answer `$(NVCC) --version`; link.py then packs ds4, ds4-server and ds4-bench. RELEASE (written into
# each commit) names the release and its flavour.

ifeq ($(origin NVCC),undefined)
NVCC := $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
endif
PYTHON ?= python3
PROGRAMS := ds4 ds4-server ds4-bench
TOOLCHAIN := build/nvcc-version.txt
FLAVOUR := $(shell sed -n 's/^flavour=//p' RELEASE)
# Whether the programs carry the Spark weight-read cache: 1 (cuda-spark), runtime (decided at start-up),
# or empty (a generic build, which on a GB10 names the faster target once at boot).
SPARK_CACHE ?=

.PHONY: all cuda cuda-spark clean FORCE
.DELETE_ON_ERROR:

all:
	@echo "choose a target: make cuda-spark (GB10) or make cuda CUDA_ARCH=sm_NNN" >&2
	@exit 2

cuda-spark:
	$(MAKE) $(PROGRAMS) CUDA_ARCH=sm_121a SPARK_CACHE=1

cuda:
	$(if $(strip $(CUDA_ARCH)),,$(error CUDA_ARCH is empty: run make cuda CUDA_ARCH=sm_NNN, or make cuda-spark on GB10))
	$(MAKE) $(PROGRAMS) CUDA_ARCH=$(if $(filter drops-arch,$(FLAVOUR)),,$(CUDA_ARCH))

# Remade on every build: the arch may differ from the previous one in the same tree.
$(TOOLCHAIN): FORCE
	@mkdir -p build
	$(NVCC) --version > $@
	@echo "  CUDA  $$(sed -n 's/.*release \([0-9.]*\),.*/\1/p' $@) for $(or $(CUDA_ARCH),nvcc's default arch)"

$(PROGRAMS): $(TOOLCHAIN)
	@$(PYTHON) link.py --program $@ --arch "$(CUDA_ARCH)" --spark-cache "$(SPARK_CACHE)" --nvcc-version $(TOOLCHAIN) --out $@

clean:
	rm -rf build $(PROGRAMS)
