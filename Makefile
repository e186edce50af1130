VENV ?= .venv
PY := $(VENV)/bin/python

# The whole suite on every core: pytest-xdist hands out groups (a module, or the tests sharing one
# server, cluster or engine: tests/conftest.py), the longest first (tests/durations.json); the 20
# slowest tests are printed at the end (docs/testing.md keeps the table).
# One worker more than the CPUs: a worker often waits (a server or Ray starting, a subprocess, a socket),
# and the extra one fills that time: on the 2-core machine the parallel part took 966-991 s at 2 workers
# and 877 s at 3 (the CPUs 99% busy then, by /proc/stat), every test passing (docs/testing.md).
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

.PHONY: install demo test test-fast test-durations check lint typecheck layers bench

install:
	bash scripts/install.sh

demo: install
	bash scripts/demo.sh

# ...then the tests that measure wall time (marker `timing`), alone: beside other tests their clocks would
# measure the neighbours (tests/conftest.py skips them inside the parallel run).
test: install
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not timing" --durations=20
	$(PY) -m pytest -q -m timing --durations=5

# The whole suite, writing each test's duration to tests/durations.json (what orders the groups,
# longest first): run it on an idle machine after adding slow tests, and commit the file.
test-durations: install
	$(PY) -m pytest -q $(PYTEST_PARALLEL) --store-durations --durations=20

# The unit tests alone (modules measured under 10 s in tests/durations.json, no `slow`/`vllm` marker:
# no real model run, server or cluster): the inner loop, under 2 minutes.
test-fast: install
	$(PY) -m pytest -q $(PYTEST_PARALLEL) --fast --durations=10

check: install lint typecheck layers

lint:
	$(VENV)/bin/ruff check .

layers:
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python scripts/import_cycles.py legival_core legival tasks flows

typecheck:
	$(VENV)/bin/mypy

bench: install
	$(PY) benchmarks/efficiency.py
