"""What an item is embedded with, and which of its text: LangGraph's ``index=`` config, or a
memcore embedder.

LangGraph keeps one vector per indexed field (and per element of a ``[*]`` path) and scores an
item by its best one. A memcore record has one vector, so an item's texts (every field of the
config or of ``put(index=[...])``, extracted with LangGraph's own ``get_text_at_path``) are
joined with newlines, in field order, and embedded once. With one field holding one text (the
default ``["$"]``: the whole value as JSON) the vector and the scores are LangGraph's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import IndexConfig, ensure_embeddings, get_text_at_path, tokenize_path

from memcore.embedders.base import Embedder
from memcore.errors import DimensionMismatchError, InvalidInputError
from memcore.store import VectorSpace
from memcore.validation import Matrix

Path = tuple[str, str | list[str]]
"""A field path as given, and as LangGraph's ``get_text_at_path`` takes it."""


@dataclass(frozen=True)
class ItemEmbedding:
    """How items and queries become vectors.

    :param embeddings: a LangChain ``Embeddings`` (from ``index["embed"]``), or ``None``.
    :param embedder: a memcore embedder (``embedder=``), or ``None``; exactly one is set.
    :param dims: the vector length.
    :param fields: the default fields to embed, as LangGraph tokenizes them.
    :param space: the vector space the store is bound to.
    """

    embeddings: Embeddings | None
    embedder: Embedder | None
    dims: int
    fields: tuple[Path, ...]
    space: VectorSpace

    def texts(self, value: Mapping[str, Any], index: Sequence[str] | None) -> str | None:
        """The text to embed for an item put with ``index`` (``None``: the configured fields)."""
        paths: Sequence[Path] = (
            self.fields if index is None else [(field, tokenize_path(field)) for field in index]
        )
        found = [text for _, tokens in paths for text in get_text_at_path(value, tokens)]
        return "\n".join(found) if found else None

    def embed_sync(self, texts: list[str], query: bool) -> Matrix:
        """The vectors of ``texts`` (a query: ``embed_query``), checked."""
        if self.embedder is not None:
            return self._checked(self.embedder.embed(texts))
        assert self.embeddings is not None
        if query:
            return self._checked([self.embeddings.embed_query(text) for text in texts])
        return self._checked(self.embeddings.embed_documents(texts))

    async def embed_async(self, texts: list[str], query: bool) -> Matrix:
        """:meth:`embed_sync` through the embedder's async API."""
        if self.embedder is not None:
            aembed = getattr(self.embedder, "aembed", None)
            if aembed is None:
                raise InvalidInputError(
                    f"the embedder {self.embedder.name!r} has no aembed: wrap it with "
                    "memcore.embedders.cache.cached() to use the async API"
                )
            return self._checked(await aembed(texts))
        assert self.embeddings is not None
        if query:
            return self._checked([await self.embeddings.aembed_query(text) for text in texts])
        return self._checked(await self.embeddings.aembed_documents(texts))

    def _checked(self, vectors: Any) -> Matrix:
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[1] != self.dims:
            raise DimensionMismatchError(
                f"the index config says {self.dims} dimensions; the embeddings returned shape {matrix.shape}"
            )
        return matrix


def item_embedding(
    index: IndexConfig | None, embedder: Embedder | None, embedder_name: str | None
) -> ItemEmbedding | None:
    """What ``index=``/``embedder=`` configure, or ``None`` for no vector search.

    :raises InvalidInputError: for an index config without ``dims`` or ``embed`` (and no
        ``embedder``), both an ``embed`` and an ``embedder``, or dimensions that disagree.
    """
    if index is None and embedder is None:
        return None
    config: dict[str, Any] = dict(index or {})
    fields = [(p, tokenize_path(p) if p != "$" else p) for p in (config.get("fields") or ["$"])]
    if embedder is not None:
        if config.get("embed") is not None:
            raise InvalidInputError("give the embeddings either as index['embed'] or as embedder=, not both")
        dims = config.get("dims", embedder.dim)
        if dims != embedder.dim:
            raise InvalidInputError(f"index['dims'] is {dims}, the embedder makes {embedder.dim}")
        space = VectorSpace(embedder_name or embedder.name, embedder.dim)
        return ItemEmbedding(None, embedder, embedder.dim, tuple(fields), space)
    dims = config.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise InvalidInputError(f"index['dims'] is the vector length, a positive integer; got {dims!r}")
    if config.get("embed") is None:
        raise InvalidInputError("index needs 'embed' (LangChain Embeddings, a function or 'provider:model')")
    try:
        embeddings = ensure_embeddings(config["embed"])
    except ValueError as exc:  # a provider string LangChain cannot load
        raise InvalidInputError(f"index['embed']: {exc}") from None
    space = VectorSpace(embedder_name or _name_of(config["embed"], embeddings), dims)
    return ItemEmbedding(embeddings, None, dims, tuple(fields), space)


def _name_of(embed: object, embeddings: Embeddings) -> str:
    """The vector-space name of LangGraph's ``embed``: the provider string, or the class (and
    model) of the embeddings, or the embedding function's qualified name."""
    if isinstance(embed, str):
        return f"langchain:{embed}"
    target = embed if not isinstance(embed, Embeddings) else type(embed)
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"
    model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
    return f"langchain:{name}:{model}" if isinstance(model, str) else f"langchain:{name}"
