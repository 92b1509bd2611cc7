# Every target sets up .venv first (idempotent: it reinstalls only when a pyproject changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memcore-installed
PIP_FLAGS := --quiet --disable-pip-version-check
QDRANT := plugins/memcore-qdrant
CHROMA := plugins/memcore-chroma
PGVECTOR := plugins/memcore-pgvector
PLUGINS := $(QDRANT) $(CHROMA) $(PGVECTOR)
# The CAMEL adapter's tests run in a venv of their own: camel-ai pins pydantic<=2.12 (see pyproject).
CAMEL_VENV := .venv-camel
CAMEL_STAMP := $(CAMEL_VENV)/.memcore-installed

.PHONY: demo test check lint types pytest lane-chroma lane-others clean

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
	$(MAKE) --no-print-directory -j2 --output-sync=target lane-chroma lane-others CHECK=1

check: lint types

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy memcore $(foreach plugin,$(PLUGINS),$(wildcard $(plugin)/memcore_*))

## pytest: the whole test suite, without lint and types
pytest: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target lane-chroma lane-others

# The suites run in two lanes side by side, one per core, of about equal length; each lane's output
# is printed whole when it ends. Each plugin's tests run on their own (their conftest and rootdir
# are the plugin's).
# Lint and types when CHECK is set, then Chroma's suite (its fixtures start `chroma run`).
lane-chroma: $(STAMP)
	$(if $(CHECK),$(MAKE) --no-print-directory check)
	$(BIN)/python -m pytest $(CHROMA)/tests

# The CAMEL adapter's tests (in their own venv, without pytest-asyncio), the core suite, Qdrant's
# (its embedded modes) and pgvector's (its fixtures start PostgreSQL).
lane-others: $(STAMP) $(CAMEL_STAMP)
	$(CAMEL_VENV)/bin/python -m pytest -W ignore::pytest.PytestConfigWarning tests-camel
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest $(QDRANT)/tests
	$(BIN)/python -m pytest $(PGVECTOR)/tests

clean:
	rm -rf $(VENV) $(CAMEL_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
