"""One URL type for every store: parsed once, typed parameters, InvalidInputError for anything wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.errors import InvalidInputError
from memcore.plugins import open_store
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore
from memcore.urls import StoreURL


def test_a_jsonl_url_with_a_parameter_opens_the_folder_before_the_query(tmp_path: Path) -> None:
    with open_store(f"jsonl://{tmp_path}/d?dimension=8") as store:
        assert isinstance(store, JsonlStore)
        assert store.path == tmp_path / "d"
        assert store.dimension == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_memory_takes_a_dimension() -> None:
    with open_store("memory://?dimension=3") as store:
        assert isinstance(store, InMemoryStore)
        assert store.dimension == 3


@pytest.mark.parametrize(
    "url",
    [
        "memory://somewhere",
        "memory://?collection=x",  # a parameter memory:// does not take
        "memory://?dimension=0",
        "memory://?dimension=²",
        "memory://?dimension=" + "9" * 5000,
        "memory://?dimension=1&dimension=2",
        "memory://#fragment",
        "jsonl://",
        "jsonl:///d?dimension=x",
        "jsonl:///d?colection=x",
        "jsonl:///d\x00e",
        "nothing-but-a-name",
    ],
)
def test_malformed_urls_raise_invalid_input_and_create_nothing(url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        open_store(url)


def test_a_store_class_refuses_another_scheme() -> None:
    with pytest.raises(InvalidInputError, match="memory://"):
        InMemoryStore.from_url("jsonl:///tmp/x")


def test_server_parts_and_typed_parameters() -> None:
    url = StoreURL.parse("x+http://[::1]:7000?collection=c&n=5&on=true", params=("collection", "n", "on"))
    assert url.server(80, secret_hint="use the environment") == ("[::1]", 7000)
    assert url.text_param("collection", "default") == "c"
    assert url.positive_int("n") == 5
    assert url.flag("on") is True
    assert StoreURL.parse("x+http://host", params=()).server(80, secret_hint="") == ("host", 80)
    for bad in ("x+http://[::1:7000", "x+http://host:99999", "x+http://host/collection", "x+http://"):
        with pytest.raises(InvalidInputError):
            StoreURL.parse(bad).server(80, secret_hint="")


def test_credentials_are_refused_without_echoing_the_password() -> None:
    with pytest.raises(InvalidInputError, match="QDRANT") as raised:
        StoreURL.parse("x+http://user:s3cret@host").server(80, secret_hint="use $QDRANT_API_KEY")
    assert "s3cret" not in str(raised.value)
    with pytest.raises(InvalidInputError) as unknown:
        StoreURL.parse("x+http://user:s3cret@host?bad=1")
    assert "s3cret" not in str(unknown.value)


def test_other_parameters_are_kept_for_a_store_that_passes_them_on() -> None:
    url = StoreURL.parse(
        "postgresql://me@/db?host=/run/pg&collection=t", params=("collection",), other_params=True
    )
    assert dict(url.params) == {"host": "/run/pg", "collection": "t"}
