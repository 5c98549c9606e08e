# streamplace: two commands on a fresh machine.
#   make demo   -- install, fetch jars, run the main job on embedded defaults, stop everything
#   make test   -- install, fetch jars, run unit + integration tests (they start and stop the
#                  broker and the cluster they need), fail when no test ran
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
SP := $(VENV)/bin/streamplace
STAMP := $(VENV)/.installed
# Tests use their own ports and runtime folder so they never touch a running demo.
PYTEST_ARGS ?=
QUICK ?=

.PHONY: install jars demo test unit integration up down clean lock help

help:
	@echo "make demo | make test | make install | make jars | make up | make down | make clean"

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24" 
	# constraints.txt pins the whole tree so pip never backtracks; the pip cache keeps the
	# multi-GB torch wheel for the next fresh install.
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

jars: install
	$(SP) jars

demo: jars
	$(SP) demo $(if $(QUICK),--quick,)

unit: install
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest: no tests ran" >&2; exit $$rc; }

test: jars
	@set -o pipefail; \
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests -- failing on purpose" >&2; exit 1; fi; \
	exit $$rc

up: jars
	$(SP) up

down:
	-$(SP) down

lock:
	$(PY) -m pip freeze --exclude-editable | grep -v '^streamplace' > constraints.txt

clean: down
	rm -rf build dist *.egg-info .pytest_cache
