# `make test` and `make demo` do all the set-up on a fresh machine (idempotent), then run.
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2 --dist loadfile
DEMO_OUT ?= out/demo

.PHONY: setup test demo lint clean

setup:
	bash scripts/setup.sh

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

# The main job: the bundled sample conversation, replayed in real time into a voice session
# with Parley's defaults; prints the latency table (report, plots and stereo WAVs in DEMO_OUT).
demo: setup
	$(VENV)/bin/parley bench voice --data benchmarks/data/voice_sample --out $(DEMO_OUT)

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
