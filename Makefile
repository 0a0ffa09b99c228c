# The front door. Every target creates the virtual environment it needs, with only what it needs:
# `make run` the runtime dependencies (the demo), `make bench` those plus the benchmarks' own
# distribution (bench/: mmgate-bench, with its plotting and hashing libraries), `make test` (and
# lint, typecheck) both distributions and the dev tools. VENV may point at a shared environment
# (VENV=/path/to/venv make test). Each set is installed once per environment; editing either
# pyproject.toml (mmgate's or bench/'s) installs it again.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# The dev set includes the other two, so an environment set up for tests runs everything.
STAMP := $(VENV)/.mmgate-installed
RUN_STAMP := $(VENV)/.mmgate-runtime
BENCH_STAMP := $(VENV)/.mmgate-bench

.PHONY: run test build lint typecheck bench peers clean quickstart-docs

# mmgate-bench is a second distribution in this repository, installed beside mmgate in the same pip
# call (pip then takes its `mmgate` requirement from the editable checkout); mmgate's `dev` extra
# cannot name it, as package metadata has no way to point at a folder of the checkout.
$(STAMP): pyproject.toml setup.py bench/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./bench
	# xds-protos (extproc) ships older copies of opentelemetry-proto's modules into the same folder;
	# whichever installs last wins, so put opentelemetry-proto's own files back (same version).
	$(PY) -m pip install -q --force-reinstall --no-deps \
	  "opentelemetry-proto==$$($(PY) -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))')"
	touch $(STAMP)

# About 70 s and 100 MB on a fresh machine (measured: docs/quickstart.md); nothing if the
# environment already has the dev set.
# The demo runs the scheduler as plain Python (MMGATE_PURE_PYTHON): compiling it would double the
# first start for no difference a person trying requests could see.
$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if [ $(STAMP) -nt pyproject.toml ]; then :; else \
	  echo "make run: installing mmgate's runtime dependencies into $(VENV) (first run only)"; \
	  MMGATE_PURE_PYTHON=1 $(PY) -m pip install -q -e . ; fi
	touch $(RUN_STAMP)

$(BENCH_STAMP): pyproject.toml bench/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt bench/pyproject.toml ]; then :; else \
	  $(PY) -m pip install -q -e . -e ./bench; fi
	touch $(BENCH_STAMP)

# Flags for the demo, e.g. make run DEMO_ARGS="--port 8081 --pods 2" (mmgate demo --help).
DEMO_ARGS ?=
run: $(RUN_STAMP)
	$(PY) -m mmgate demo $(DEMO_ARGS)

# The scheduler's per-decision modules compiled with mypyc (src/mmgate/compiled.py lists them,
# setup.py builds them): rebuilt in place when one changed since the last build (about a minute of
# CPU). MMGATE_PURE_PYTHON=1 skips it; the sources then run as they are.
# setuptools keeps a library whose generated C did not change (a checkout that only touched a
# source), so the library is touched after a build: the import check compares it with the sources.
build: $(STAMP)
	@if PYTHONPATH=src $(PY) -W ignore -c 'import sys, mmgate.compiled as c; sys.exit(not c.needs_build())'; then \
	  echo "make build: compiling $$(PYTHONPATH=src $(PY) -c 'import mmgate.compiled as c; print(len(c.MODULES))' 2>/dev/null) modules with mypyc"; \
	  $(PY) setup.py -q build_ext --inplace; \
	  touch src/mmgate_compiled__mypyc.*; fi

# The suite runs against the compiled build (tests/test_compiled.py checks that it is the one loaded):
# the product's tests (tests/) and the benchmarks' (bench/tests/), as pyproject.toml's testpaths say.
test: build lint typecheck
	MMGATE_EXPECT_COMPILED=1 $(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck: $(STAMP)
	$(PY) -m mypy

bench: $(BENCH_STAMP)
	$(PY) -m mmgate bench headline --out results/headline

# Re-run every command docs/quickstart.md shows against a fresh demo (port 8080) and paste the
# new output into the page (a few minutes; needs the dev set for Envoy and the openai client).
quickstart-docs: $(STAMP)
	$(PY) bench/scripts/capture_quickstart.py

# The peer routers of `mmgate bench overhead`, in their own environment (pinned: the published
# overhead figures name these versions). Not needed by `make test`.
PEERS_VENV ?= .venv-peers
peers:
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q sglang-router==0.3.2 vllm-router==0.1.17 smg==1.13.0

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache results build
	find src -name "*.so" -delete
