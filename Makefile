# `make test` and `make demo` do all the set-up on a fresh machine (idempotent), then run.
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: setup test demo lint clean

setup:
	bash scripts/setup.sh

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/parley models --check

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
