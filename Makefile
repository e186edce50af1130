VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test check lint typecheck layers bench

install:
	bash scripts/install.sh

demo: install
	bash scripts/demo.sh

test: install
	$(PY) -m pytest -q

check: install lint typecheck layers

lint:
	$(VENV)/bin/ruff check .

layers:
	$(VENV)/bin/lint-imports

typecheck:
	$(VENV)/bin/mypy

bench: install
	$(PY) benchmarks/efficiency.py
