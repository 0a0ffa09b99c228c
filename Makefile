# The front door. Every target creates the virtual environment it needs.
# VENV may point at a shared environment (VENV=/path/to/venv make test).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mmgate-installed
PYTHON ?= python3

.PHONY: run test lint typecheck bench peers clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m mmgate demo

test: $(STAMP) lint typecheck
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check src tests
	$(PY) -m ruff format --check src tests

typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) -m mmgate bench headline --out results/headline

# The peer routers of `mmgate bench overhead`, in their own environment (pinned: the published
# overhead figures name these versions). Not needed by `make test`.
PEERS_VENV ?= .venv-peers
peers:
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q sglang-router==0.3.2 vllm-router==0.1.17

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache results
