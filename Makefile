# Every target sets up .venv first (idempotent: it reinstalls only when a pyproject changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memcore-installed
PIP_FLAGS := --quiet --disable-pip-version-check
PLUGINS := plugins/memcore-qdrant plugins/memcore-chroma plugins/memcore-pgvector
CHROMA := plugins/memcore-chroma
# The CAMEL adapter's tests run in a venv of their own: camel-ai pins pydantic<=2.12 (see pyproject).
CAMEL_VENV := .venv-camel
CAMEL_STAMP := $(CAMEL_VENV)/.memcore-installed

.PHONY: demo test check lint types pytest pytest-lane pytest-chroma pytest-camel clean

$(STAMP): pyproject.toml tests/plugin_example/pyproject.toml $(PLUGINS:%=%/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_FLAGS) --upgrade pip
# torch first, pinned to its CPU build: left to the st extra, pip would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install $(PIP_FLAGS) torch==2.13.0
	$(BIN)/python -m pip install $(PIP_FLAGS) -e ".[dev,st]" -e ./tests/plugin_example \
		$(foreach plugin,$(PLUGINS),-e "./$(plugin)[test]")
	touch $(STAMP)

$(CAMEL_STAMP): pyproject.toml
	test -x $(CAMEL_VENV)/bin/python || $(PYTHON) -m venv $(CAMEL_VENV)
	$(CAMEL_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(CAMEL_VENV)/bin/python -m pip install $(PIP_FLAGS) -e ".[camel,testing]"
	touch $(CAMEL_STAMP)

## demo: the main job on the embedded default store (two agents, restarts, forget, budget; real MiniLM)
demo: $(STAMP)
	$(BIN)/memcore demo

## test: lint, types and the whole test suite
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target pytest-chroma pytest-lane check

check: lint types

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy memcore $(foreach plugin,$(PLUGINS),$(wildcard $(plugin)/memcore_*))

# Each plugin's tests run on their own (their conftest and rootdir are the plugin's), in two lanes
# side by side, one per core: Chroma's suite (its server busy for most of it) and all the others
# (with the CAMEL venv's set-up; lint and types take the first core free). Each lane's output is
# printed whole when it ends.
pytest: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target pytest-chroma pytest-lane

pytest-lane: $(STAMP) pytest-camel
	$(BIN)/python -m pytest
	$(foreach plugin,$(filter-out $(CHROMA),$(PLUGINS)),$(BIN)/python -m pytest $(plugin)/tests &&) true

pytest-chroma: $(STAMP)
	$(BIN)/python -m pytest $(CHROMA)/tests

pytest-camel: $(CAMEL_STAMP)
	$(CAMEL_VENV)/bin/python -m pytest -W ignore::pytest.PytestConfigWarning tests-camel  # no pytest-asyncio there

clean:
	rm -rf $(VENV) $(CAMEL_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
