"""Real plugin discovery, end to end, with the installed example plugin.

``tests/plugin_example`` is a third-party plugin package (``memcore-example-store``).
``make test`` installs it; these tests find it through its ``memcore`` entry point,
list it with ``python -m memcore plugins``, and run the store conformance suite
on the store it registers. Without it installed they fail: they never skip.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from memcore.plugin_manager import BUILTIN_PLUGIN_NAME, reset_plugin_manager
from memcore.plugins import open_store, plugin_infos, store_classes
from memcore.testing import StoreConformance, StoreFactory

DISTRIBUTION = "memcore-example-store"
ENTRY_POINT = "example-store"


def _example_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            f"the example plugin {DISTRIBUTION} is not installed, so plugin discovery cannot be tested. "
            "Run `make test` (it runs `pip install ./tests/plugin_example`)",
            pytrace=False,
        )


@pytest.fixture
def example_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Load plugins with the example plugin selected; restore the usual selection afterwards."""
    version = _example_version()
    monkeypatch.setenv("MEMCORE_LOAD_PLUGINS", ENTRY_POINT)
    reset_plugin_manager()
    try:
        yield version
    finally:
        reset_plugin_manager()


def test_example_plugin_is_found_through_its_entry_point(example_plugin: str) -> None:
    [info] = [info for info in plugin_infos() if info.name == ENTRY_POINT]
    assert (info.distribution, info.version) == (DISTRIBUTION, example_plugin)
    assert info.hooks == ("memcore_register_stores",)
    assert info.stores == {"example": "memcore_example_store.store.ExampleStore"}
    assert store_classes()["example"].plugin == ENTRY_POINT


@pytest.mark.parametrize(
    "selection", [None, DISTRIBUTION, "memcore_example_store", f" {ENTRY_POINT} , {DISTRIBUTION} "]
)
def test_selection_by_either_name_or_all(
    example_plugin: str, monkeypatch: pytest.MonkeyPatch, selection: str | None
) -> None:
    if selection is None:
        monkeypatch.delenv("MEMCORE_LOAD_PLUGINS")
    else:
        monkeypatch.setenv("MEMCORE_LOAD_PLUGINS", selection)
    reset_plugin_manager()
    assert store_classes()["example"].plugin == ENTRY_POINT


def test_open_store_opens_the_plugin_store(example_plugin: str) -> None:
    with open_store("example://") as store:
        assert type(store).__module__ == "memcore_example_store.store"
        assert store.name == "example"
        assert not store.capabilities.durable


def test_example_plugin_is_left_out_when_not_selected(
    example_plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMCORE_LOAD_PLUGINS", "")
    reset_plugin_manager()
    assert "example" not in store_classes()
    with pytest.raises(KeyError, match="example://"):
        open_store("example://")


def test_python_m_memcore_plugins_lists_everything() -> None:
    version = _example_version()
    env = {key: value for key, value in os.environ.items() if key != "MEMCORE_LOAD_PLUGINS"}
    result = subprocess.run(
        [sys.executable, "-m", "memcore", "plugins", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows[BUILTIN_PLUGIN_NAME]["stores"]) == {"memory", "jsonl"}
    assert set(rows[BUILTIN_PLUGIN_NAME]["embedders"]) == {"hash", "sentence-transformers/all-MiniLM-L6-v2"}
    example = rows[ENTRY_POINT]
    assert (example["distribution"], example["version"]) == (DISTRIBUTION, version)
    assert example["hooks"] == ["memcore_register_stores"]
    assert example["stores"] == {"example": "memcore_example_store.store.ExampleStore"}


class TestExampleStoreConformance(StoreConformance):
    """The third-party store passes the same suite as the built-ins, opened by URL after discovery."""

    @pytest.fixture
    def store_factory(self, example_plugin: str) -> StoreFactory:
        return lambda: open_store("example://")
