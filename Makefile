# One command each, thin calls of the `stalebench` command (stalebench/cli.py) the venv installs: `make demo`
# (set up + `stalebench run`: the demo grid; CONFIG= another, checked first), `make test` (set up + run the tests, CORES at a time;
# `make test-quick`: those not marked slow, slurm or browser, before a commit),
# `make ui` (`stalebench ui`: the MLflow UI on 127.0.0.1 at the grid's claims; CONFIG=, GRID=, PORT= to choose).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= 2
CONFIG ?= config.yaml
PORT ?= 5000
UV_VERSION := 0.13.9

.PHONY: setup demo test test-quick lint ui

setup: $(VENV)/.installed

# The project with every dependency pinned by the lock, installed by uv (pip where uv cannot be installed);
# torch as the CPU build on a machine without a GPU. The setup's last line says which torch build and why.
$(VENV)/.installed: pyproject.toml requirements.lock envs/setup_venv.py
	$(PYTHON) envs/setup_venv.py --venv $(VENV) --uv-version $(UV_VERSION)
	touch $@

demo: setup
	$(BIN)/stalebench run -c$(CORES) $(if $(filter-out config.yaml,$(CONFIG)),--configfile $(CONFIG))

# the tests on CORES pytest-xdist workers, side by side (tests/README.md: what runs apart); the log ends with
# the 25 slowest tests' times, so a CI run names what its wall time went to (tests/README.md, "The slowest tests")
test: setup
	$(BIN)/python -m pytest -q -n $(CORES) --durations=25

test-quick: setup
	$(BIN)/python -m pytest -q -n $(CORES) -m "not slow and not slurm and not browser"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

ui: setup
	$(BIN)/stalebench ui --config $(CONFIG) --port $(PORT) $(if $(GRID),--grid $(GRID))
