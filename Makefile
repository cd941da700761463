# The two commands of the README for a checkout are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
# Every Molecule scenario; the longest start first, so that two side by side end near the same time.
ALL_SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
LONGEST_FIRST := $(filter $(ALL_SCENARIOS),pair site fleet service gateway perf weights)
SCENARIOS ?= $(LONGEST_FIRST) $(filter-out $(LONGEST_FIRST),$(ALL_SCENARIOS))
# Scenarios side by side. Three on a 2-core machine: with two, its cores stood idle 15 % of the phase while
# the scenarios waited on their hosts (vmstat over a fresh clone's make test); a third fills those waits.
MOLECULE_JOBS ?= 3

.PHONY: setup host demo sandbox-up sandbox-down test lint unit sanity docs molecule ee clean

# The development tools: running the collection (requirements.txt) and testing, linting and releasing it
# (requirements-dev.txt). Redone when either file changes.
setup: $(VENV)/.installed

# --no-compile: Python writes bytecode on first import, for what is used; compiling every file of the
# ansible package's collections up front took half of a fresh clone's setup.
$(VENV)/.installed: requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -r requirements-dev.txt
	touch $@

# Packages and the two kernel/cgroup fixes rootful Podman needs on this kind of machine (needs root).
host:
	tests/sandbox/prepare-host.sh

sandbox-up: setup host
	$(PY) tests/sandbox/sandbox.py up

sandbox-down: setup
	$(PY) tests/sandbox/sandbox.py down

# The README's first command for a checkout: everything set up, then the main job on sandbox spark01.
demo: sandbox-up
	$(BIN)/ansible-playbook site.yml -l spark01
	$(PY) tests/sandbox/sandbox.py show spark01

# The README's second command for a checkout: every test. The checks (lint, unit, sanity) run side by side,
# as none of them keeps both cores busy alone, then the Molecule scenarios; the last line gives each phase's
# time (CI shows only the last lines; the molecule phase prints each scenario's time as it ends). A failed
# check lets the other checks end and starts no scenario.
CHECKS := lint unit sanity
test: host setup
	@rm -rf .sandbox/phases && mkdir -p .sandbox/phases; SECONDS=0; \
	$(MAKE) --no-print-directory --jobs=$(words $(CHECKS)) --output-sync=target $(CHECKS:%=timed-%); \
	rc=$$?; checks=$$SECONDS; \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory timed-molecule; rc=$$?; fi; \
	echo "== phases: $$(cd .sandbox/phases && cat $(CHECKS) molecule 2>/dev/null | paste -sd '|' - \
	  | sed 's/|/, /g') (the checks side by side: $$checks s)"; \
	[ $$rc -eq 0 ] || exit 2

# One phase of make test, its time (or its failure) kept for the last line.
timed-%:
	@SECONDS=0; if $(MAKE) --no-print-directory $*; then echo "$* $$SECONDS s" > .sandbox/phases/$*; \
	else echo "$* FAILED after $$SECONDS s" > .sandbox/phases/$*; exit 2; fi

lint: setup
	$(BIN)/yamllint --strict .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint

# The unit tests spread over UNIT_JOBS processes (pytest-xdist): alone they keep one core of two busy.
UNIT_JOBS ?= 2
unit: setup
	$(BIN)/pytest -q -n $(UNIT_JOBS) tests

# The collection as users get it: built, and installed alone under a throw-away $$dir (removed at the end),
# with Ansible's defaults (an empty ansible.cfg, that directory the only collections path: ours would make
# the repository's collections/ link the installed ds4.fleet, and the install a no-op); $$root is it.
INSTALL_ALONE = set -e; dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
  export ANSIBLE_CONFIG="$$dir/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$$dir"; : > "$$ANSIBLE_CONFIG"; \
  $(BIN)/ansible-galaxy collection build --output-path "$$dir" . >/dev/null; \
  $(BIN)/ansible-galaxy collection install --force -p "$$dir" "$$dir"/ds4-fleet-*.tar.gz >/dev/null; \
  root="$$dir/ansible_collections/ds4/fleet"

# ansible-test sanity and antsibull-docs' lint on the collection installed alone (ansible-test needs its
# ansible_collections/ds4/fleet path), with tests/sanity's ignore file beside it. tests/sanity/targets.py
# first proves that ansible-test's targets are the tarball's files, every one; the collection's version
# comes from the installed MANIFEST.json.
# --venv: each test's tools come from PyPI into ~/.ansible/test; tests/sanity/get_pip.py bootstraps pip in
# them, in place of the get-pip.py that ansible-test would download from a host out of reach.
SANITY_PYTHON ?= $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
SANITY_CACHE = $(HOME)/.ansible/test/cache
# The pip version ansible-test installs in its virtual environments.
SANITY_PIP = $(shell $(PY) -c 'import ansible_test, pathlib, re; \
  p = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"; \
  print(re.search(r"pip=.([0-9.]+).", p.read_text())[1])')
sanity: setup
	$(BIN)/pip download --quiet --no-deps --dest $(SANITY_CACHE)/get_pip_wheels pip==$(SANITY_PIP)
	install -m 0644 tests/sanity/get_pip.py $(SANITY_CACHE)/get_pip_$(subst .,_,$(SANITY_PIP)).py
	@$(INSTALL_ALONE); \
	  cd "$$root"; \
	  $(abspath $(PY)) $(abspath tests/sanity/targets.py) "$$dir"/ds4-fleet-*.tar.gz; \
	  antsibull-docs lint-collection-docs --plugin-docs .; \
	  ansible-test sanity --venv --python $(SANITY_PYTHON) $(SANITY_ARGS)

# The collection's docs site, as antsibull-docs makes it from the built collection installed alone (module,
# filter and role pages from their documentation and argument specs): $(DOCS_DIR)/build/html/index.html.
# tests/docs/conf_offline.py lets it build offline; build.sh fails on any warning.
DOCS_DIR ?= .sandbox/docs
docs: setup
	@$(INSTALL_ALONE); \
	  rm -rf $(DOCS_DIR); mkdir -p -m 0755 $(DOCS_DIR); \
	  antsibull-docs sphinx-init --use-current --fail-on-error --project ds4.fleet --title ds4.fleet \
	    --copyright "ds4-fleet developers" --dest-dir $(DOCS_DIR) ds4.fleet >/dev/null; \
	  cat tests/docs/conf_offline.py >> $(DOCS_DIR)/conf.py; \
	  $(DOCS_DIR)/build.sh
	@echo "The docs site: $(DOCS_DIR)/build/html/index.html"

# The execution environment for AWX and ansible-navigator (execution-environment.yml) as image $(EE_IMAGE):
# the collection built into dist/, the image's Python packages downloaded by this machine's pip and installed
# from those wheels, on the base $(EE_BASE_IMAGE) or one made from the sandbox's Debian image
# (tests/sandbox/ee.py; the ee scenario runs this target and then the image).
EE_IMAGE ?= localhost/ds4-fleet-ee:latest
EE_BASE_IMAGE ?=
ee: setup host
	$(PY) tests/sandbox/ee.py --image $(EE_IMAGE) $(if $(EE_BASE_IMAGE),--base $(EE_BASE_IMAGE))

# Scenarios side by side, each logged to .sandbox/molecule/<scenario>.log (tests/sandbox/scenarios.py):
# CI shows only the last lines of the output, so after a failure its failed tests are printed last.
molecule: setup host
	$(PY) tests/sandbox/scenarios.py --jobs $(MOLECULE_JOBS) --logs .sandbox/molecule \
	  --reports .sandbox/verify $(SCENARIOS)
