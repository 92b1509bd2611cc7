# Every target sets up .venv first (idempotent: it reinstalls only when a pyproject changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memcore-installed
PIP_FLAGS := --quiet --disable-pip-version-check

.PHONY: demo test check lint types pytest clean

$(STAMP): pyproject.toml tests/plugin_example/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_FLAGS) --upgrade pip
# torch first, pinned to its CPU build: left to the st extra, pip would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install $(PIP_FLAGS) torch==2.13.0
	$(BIN)/python -m pip install $(PIP_FLAGS) -e ".[dev,st]" -e ./tests/plugin_example
	touch $(STAMP)

## demo: the main job on the embedded default store (two agents, restarts, forget, budget; real MiniLM)
demo: $(STAMP)
	$(BIN)/memcore demo

## test: lint, types and the whole test suite
test: check pytest

check: lint types

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy memcore

pytest: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
