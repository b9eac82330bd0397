# The README's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each sets itself up on a fresh machine: virtual environment, pip install, Maven jars.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ikkai-installed
# The exact versions CI ran with; `make lock` renews it on purpose (pyproject.toml keeps the ranges).
LOCK   := constraints.txt
# Test worker processes (pytest-xdist); 0 runs the suite in one process, as a single file is run by hand.
TEST_WORKERS ?= 2

.PHONY: demo smoke test lint setup clean lock

# The whole platform end to end on its own fresh stack, with chaos and a replay; the report on stdout.
# Options pass through: make demo DEMO_ARGS="--size 500 --no-chaos -o json"
demo: setup
	$(BIN)/ikkai demo $(DEMO_ARGS)

# A quick check that the embedded stack works (transactions, a Connect file source).
smoke: setup
	$(BIN)/ikkai smoke

test: setup lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

setup: $(STAMP)
	$(BIN)/ikkai setup

$(STAMP): pyproject.toml $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || \
	  { echo "make: ikkai needs Python 3.11 or newer as '$(PYTHON)' (install it, or run make PYTHON=/path/to/python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade --constraint $(LOCK) pip
	$(BIN)/pip install --quiet --constraint $(LOCK) --editable '.[all,test]'
	touch $(STAMP)

# Renew the lock: the newest versions pyproject.toml allows, resolved in a scratch environment.
# A deliberate step: run it, run `make test`, commit constraints.txt with the test result.
lock:
	rm -rf .lock-venv build
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet '.[all,test]'
	{ echo "# Exact versions for 'make setup' (pip --constraint). Renew with 'make lock', never by hand."; \
	  echo "# Resolved with $$(.lock-venv/bin/python --version) on $$(uname -sm)."; \
	  .lock-venv/bin/pip freeze --all --exclude ikkai | grep -v -E '^(setuptools|wheel)=='; } > $(LOCK)
	rm -rf .lock-venv build

clean:
	-$(BIN)/ikkai stack down
	-$(BIN)/ikkai stack --home "$${IKKAI_HOME:-$$HOME/.ikkai}/demo" down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
