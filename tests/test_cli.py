"""``memcore`` on the command line: the ``plugins`` command and error handling."""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

import pytest

from memcore.cli import main
from memcore.plugin_manager import BENCH_PLUGIN_NAME, BUILTIN_PLUGIN_NAME

BUILTIN_ROW = {
    "name": BUILTIN_PLUGIN_NAME,
    "distribution": None,
    "version": None,
    "hooks": ["memcore_register_embedders", "memcore_register_stores"],
    "stores": {
        "memory": "memcore.stores.in_memory.InMemoryStore",
        "jsonl": "memcore.stores.jsonl.JsonlStore",
    },
    "embedders": {
        "hash": "memcore.embedders.hashing.HashEmbedder",
        "sentence-transformers/all-MiniLM-L6-v2": (
            "memcore.embedders.sentence_transformers.SentenceTransformerEmbedder"
        ),
    },
}
BENCH_ROW = {
    "name": BENCH_PLUGIN_NAME,
    "distribution": None,
    "version": None,
    "hooks": ["memcore_add_hookspecs"],
    "stores": {},
    "embedders": {},
}


def test_plugins_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [BUILTIN_ROW, BENCH_ROW]


def test_plugins_json_includes_registered_plugins(
    stub_plugin: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[stub_plugin.name]["stores"] == {
        "stub": "conftest.StubStore",
        "stub+extra": "conftest.StubStore",
    }
    assert rows[stub_plugin.name]["embedders"] == {"stub-hash": "memcore.embedders.hashing.HashEmbedder"}


def test_plugins_table(stub_plugin: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    header, builtin, bench, stub = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "VERSION", "DISTRIBUTION", "HOOKS", "STORES", "EMBEDDERS"]
    assert builtin.startswith(BUILTIN_PLUGIN_NAME)
    assert "(built-in)" in builtin
    assert "memcore_register_embedders, memcore_register_stores" in builtin
    assert "memory://, jsonl://" in builtin
    assert builtin.endswith("hash, sentence-transformers/all-MiniLM-L6-v2")
    assert bench.startswith(BENCH_PLUGIN_NAME)
    assert "memcore_add_hookspecs" in bench
    assert stub.startswith(stub_plugin.name)
    assert "stub://, stub+extra://" in stub
    for column in ("VERSION", "DISTRIBUTION", "HOOKS", "STORES", "EMBEDDERS"):
        start = header.index(column)
        assert builtin[start - 2 : start] == "  ", f"{column} is not aligned"
        assert stub[start - 2 : start] == "  ", f"{column} is not aligned"


def test_a_memcore_error_is_reported_with_exit_status_1(
    fresh_plugins: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "no-such-plugin")
    assert main(["plugins"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("memcore: error: MEMCORE_LOAD_PLUGINS names 'no-such-plugin'")


def test_without_a_command_help_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: memcore" in captured.err
    assert "plugins" in captured.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"memcore {importlib.metadata.version('memcore')}"
