# One command each: `make demo` (set up + run the demo grid), `make test` (set up + run the tests),
# `make ui` (the MLflow UI on 127.0.0.1 at the grid's runs; CONFIG=, GRID=, PORT= to choose).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= 2
CONFIG ?= config.yaml
PORT ?= 5000

.PHONY: setup demo test lint ui

setup: $(VENV)/.installed

# torch first, from the pinned CPU wheel; then the project with every dependency pinned by the lock.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/snakemake -c$(CORES)

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

ui: setup
	$(BIN)/python -m tracking.ui --config $(CONFIG) --port $(PORT) $(if $(GRID),--grid $(GRID))
