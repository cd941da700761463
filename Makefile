# The two commands the README opens with are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
# Molecule scenarios run one after another: container names are global on the machine.
SCENARIOS ?= $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: setup host demo sandbox-up sandbox-down test lint unit molecule clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

# Packages and the two kernel/cgroup fixes rootful Podman needs on this kind of machine (needs root).
host:
	tests/sandbox/prepare-host.sh

sandbox-up: setup host
	$(PY) tests/sandbox/sandbox.py up

sandbox-down: setup
	$(PY) tests/sandbox/sandbox.py down

# Command one of the README: everything set up, then the main job on sandbox spark01.
demo: sandbox-up
	$(BIN)/ansible-playbook site.yml -l spark01
	$(PY) tests/sandbox/sandbox.py show spark01

# Command two of the README: every test.
test: host setup lint unit molecule

lint: setup
	$(BIN)/yamllint --strict .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint

unit: setup
	$(BIN)/pytest -q tests

molecule: setup host
	@set -e; for s in $(SCENARIOS); do echo "== molecule test -s $$s"; $(BIN)/molecule test -s $$s; done

# Everything the sandbox left on this machine: containers, networks, images, state, the virtualenv.
clean: sandbox-down
	for n in $$(podman network ls --format '{{.Name}}' | grep '^mol-.*-net$$'); do \
	  $(PY) tests/sandbox/sandbox.py --prefix "$${n%net}" down; done
	podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/ds4-sandbox-spark:' | xargs -r podman rmi
	rm -rf $(VENV) .sandbox
