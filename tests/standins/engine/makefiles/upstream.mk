# STAND-IN for upstream ds4's Makefile (antirez/ds4, test infrastructure of ds4-fleet, NOT the real engine),
# of its late-2026 shape (engine contract, "The engine owners run in late 2026"): `make cuda-spark` is
# `$(MAKE) -B <programs> CUDA_ARCH=sm_121`, and CUDA_ARCH=sm_121 maps to native sm_121a code
# (`-gencode arch=compute_121a,code=sm_121a`); no Spark weight-read cache define upstream. `make cuda-generic`
# builds for the GPU present (native), `make cuda CUDA_ARCH=sm_NNN` for that arch. Upstream also builds
# ds4-eval and ds4-agent, which the stand-in leaves out (the provisioner runs neither). A commit of flavour
# build-broken fails in link.py, as upstream main sometimes fails to build (issue #974).

ifeq ($(origin NVCC),undefined)
NVCC := $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
endif
PYTHON ?= python3
PROGRAMS := ds4 ds4-server ds4-bench
TOOLCHAIN := build/nvcc-version.txt
# CUDA_ARCH=sm_121 is the GB10: native code for its arch-specific variant.
GENCODE_ARCH = $(if $(filter sm_121,$(CUDA_ARCH)),sm_121a,$(CUDA_ARCH))

.PHONY: all cuda cuda-spark cuda-generic clean FORCE
.DELETE_ON_ERROR:

all:
	@echo "choose a target: make cuda-spark (GB10), make cuda-generic or make cuda CUDA_ARCH=sm_NNN" >&2
	@exit 2

cuda-spark:
	$(MAKE) -B $(PROGRAMS) CUDA_ARCH=sm_121

cuda-generic:
	$(MAKE) $(PROGRAMS) CUDA_ARCH=native

cuda:
	$(if $(strip $(CUDA_ARCH)),,$(error CUDA_ARCH is empty: run make cuda CUDA_ARCH=sm_NNN, or make cuda-spark on GB10))
	$(MAKE) $(PROGRAMS) CUDA_ARCH=$(CUDA_ARCH)

# Remade on every build: the arch may differ from the previous one in the same tree.
$(TOOLCHAIN): FORCE
	@mkdir -p build
	$(NVCC) --version > $@
	@echo "  CUDA  $$(sed -n 's/.*release \([0-9.]*\),.*/\1/p' $@) for $(or $(CUDA_ARCH),nvcc's default arch)"

$(PROGRAMS): $(TOOLCHAIN)
	@$(PYTHON) link.py --program $@ --arch "$(GENCODE_ARCH)" --nvcc-version $(TOOLCHAIN) --out $@

clean:
	rm -rf build $(PROGRAMS)
