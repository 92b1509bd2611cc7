"""A LangChain ``VectorStore`` over any memcore store, bound to one scope (``memcore[langchain]``).

    from memcore import open_store
    from memcore.integrations.langchain import MemcoreVectorStore
    from memcore.scope import Scope

    store = open_store("qdrant:///var/lib/agent")
    docs = MemcoreVectorStore(store, Scope(tenant="acme", user_id="u1"), embeddings)
    docs.add_documents([Document("Kyoto in October", metadata={"source": "notes"})], ids=["1"])
    docs.as_retriever(search_kwargs={"k": 3, "filter": {"source": "notes"}}).invoke("trip")

Every read and delete goes through the bound scope made exact
(:meth:`memcore.scope.Scope.exact`), which every store filters on natively: a
vector store on ``Scope(tenant="acme")`` reads and deletes only records whose
scope is exactly that, never those of ``Scope(tenant="acme", user_id="u1")``,
whatever metadata they carry. Two vector stores on two scopes of one memcore
store never see or delete each other's documents.

Documents are records of kind ``document`` (:data:`DOCUMENT_KIND`); other records
of the scope (an agent's turns) are never returned or deleted. LangChain ids are
strings of any shape (``"1"``); a record id is a UUID (Qdrant takes nothing else).
A new document gets a random UUID, so that another scope cannot compute the record
of a document id (and a record is its scope plus its id, so no scope can use or
block another's ids anyway); the document id is kept in the record
(metadata ``lc_id``) and looked up within the exact scope, so adding an id again
replaces that document. (Two writers adding the same new id at the same moment
may leave two records; the next add of that id keeps one.) Metadata entries memcore can store as is (see
:func:`memcore.records.is_metadata_entry`) stay filterable; the others (nested
values, ``None``, keys that are not identifiers) are kept as JSON under ``lc_extra``
and come back unchanged, but cannot be filtered on. Metadata keys starting with
``lc_`` are reserved. Max-marginal-relevance search reads the candidates' vectors
back from the store (:meth:`memcore.store.Store.vectors`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar
from uuid import UUID, uuid4

import numpy as np

try:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import VectorStore
    from langchain_core.vectorstores.utils import maximal_marginal_relevance
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "memcore.integrations.langchain needs langchain-core: pip install 'memcore[langchain]'"
    ) from exc

from memcore.errors import FilterError, InvalidInputError
from memcore.filters import MAX_DEPTH, MAX_FILTER_TERMS, FilterSpec
from memcore.plugins import open_store
from memcore.records import MemoryRecord, Message, MetadataValue, ScoredRecord, is_metadata_entry
from memcore.scope import Scope
from memcore.store import Store, VectorSpace
from memcore.validation import check_scope

DOCUMENT_KIND = "document"
"""The ``kind`` of the records that hold LangChain documents."""

RESERVED_PREFIX = "lc_"
ID_KEY = "lc_id"
EXTRA_KEY = "lc_extra"
_OPERATORS_WITH_SUBFILTERS = ("$and", "$or")
_IDS_PER_READ = MAX_FILTER_TERMS // 2
"""Document ids looked up per read (an ``$in`` counts one filter term per value)."""


class MemcoreVectorStore(VectorStore):
    """A LangChain vector store whose documents live in ``store`` within ``scope``.

    :param store: any memcore store (``open_store(url)``); it is not closed by this object.
    :param scope: every read, write and delete is limited to it.
    :param embedding: embeds documents and queries. The store is bound to it by
        ``embedder_name`` (on the first write or search): a store whose vectors come
        from another embedder is refused with ``EmbedderMismatchError``.
    :param embedder_name: the name the store is bound to; by default the class of
        ``embedding`` and its ``model`` or ``model_name`` attribute when it has one.
    """

    supported_filter_operators: ClassVar[str] = "$eq $ne $gt $gte $lt $lte $in $nin $exists $and $or $not"

    def __init__(
        self, store: Store, scope: Scope, embedding: Embeddings, *, embedder_name: str | None = None
    ) -> None:
        self.store = store
        self.scope = check_scope(scope)
        self._own = self.scope.exact()  # every read and delete: this scope's own records only
        self._embedding = embedding
        self._embedder_name = embedder_name or _embedder_name(embedding)

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings the documents and queries are embedded with."""
        return self._embedding

    # -- writes -----------------------------------------------------------------------------

    def add_documents(
        self, documents: list[Document], ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        """Embed and store ``documents``; a document id already stored in the scope is replaced.

        :param ids: one id per document; otherwise each document's own ``id``, or a new UUID.
        :returns: the documents' ids.
        """
        document_ids, latest = _identified(documents, ids, kwargs)
        if latest:
            self._write(
                latest, self._embedding.embed_documents([doc.page_content for doc in latest.values()])
            )
        return document_ids

    async def aadd_documents(
        self, documents: list[Document], ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        """:meth:`add_documents`, awaited: the embeddings' async API, then the store's workers."""
        document_ids, latest = _identified(documents, ids, kwargs)
        if latest:
            texts = [doc.page_content for doc in latest.values()]
            await self.store.run_in_worker(self._write, latest, await self._embedding.aembed_documents(texts))
        return document_ids

    def _write(self, latest: dict[str, Document], vectors: list[list[float]]) -> None:
        stored = self._stored(list(latest))
        records = [
            self._record(stored[i][0].id if i in stored else uuid4(), i, doc) for i, doc in latest.items()
        ]
        self._bind(len(vectors[0]))
        self.store.add(records, vectors)
        # Records a concurrent add of the same new id left behind: keep the one just replaced.
        extra = [record.id for found in stored.values() for record in found[1:]]
        if extra:
            self.store.delete(self._own, extra)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete these documents of the scope (missing ids are ignored), or with ``None`` all of them.

        Other records of the scope (an agent's turns) are never deleted.
        """
        _refuse_options(kwargs)
        if ids is None:
            self.store.delete_where(self._own, self._documents_filter())
            return True
        wanted = list(dict.fromkeys(_check_id(i) for i in ids))
        for start in range(0, len(wanted), _IDS_PER_READ):
            self.store.delete_where(self._own, _with_ids(wanted[start : start + _IDS_PER_READ]))
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """:meth:`delete`, awaited (on the store's workers)."""
        return await self.store.run_in_worker(self.delete, ids, **kwargs)

    # -- reads ------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of the scope with these ids, in the order given; missing ids are skipped."""
        wanted = list(dict.fromkeys(_check_id(i) for i in ids))
        stored = self._stored(wanted)
        return [_document(stored[i][0]) for i in wanted if i in stored]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """:meth:`get_by_ids`, awaited (on the store's workers)."""
        return await self.store.run_in_worker(self.get_by_ids, ids)

    def similarity_search(
        self, query: str, k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents most similar to ``query``, best first.

        :param filter: a memcore filter over the documents' metadata keys, such as
            ``{"source": "notes"}`` or ``{"$or": [{"page": {"$gt": 3}}, {"draft": False}]}``.
        """
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter=filter, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` best documents with their cosine similarity to ``query`` (in [-1, 1])."""
        _refuse_options(kwargs)
        return self._search(self._embedding.embed_query(query), k, filter)

    async def asimilarity_search(
        self, query: str, k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`similarity_search`, awaited."""
        hits = await self.asimilarity_search_with_score(query, k, filter=filter, **kwargs)
        return [doc for doc, _ in hits]

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_with_score`, awaited: the embeddings' async API, then the
        store's workers."""
        _refuse_options(kwargs)
        vector = await self._embedding.aembed_query(query)
        return await self.store.run_in_worker(self._search, vector, k, filter)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents most similar to ``embedding``, best first."""
        _refuse_options(kwargs)
        return [doc for doc, _ in self._search(embedding, k, filter)]

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, *, filter: FilterSpec | None = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`similarity_search_by_vector`, awaited (on the store's workers)."""
        return await self.store.run_in_worker(
            self.similarity_search_by_vector, embedding, k, filter=filter, **kwargs
        )

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: FilterSpec | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` most similar to ``query``, chosen for relevance and
        diversity (``lambda_mult``: 1 relevance only, 0 diversity only)."""
        _refuse_options(kwargs)
        vector = self._embedding.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(vector, k, fetch_k, lambda_mult, filter=filter)

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: FilterSpec | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search`, awaited."""
        _refuse_options(kwargs)
        vector = await self._embedding.aembed_query(query)
        return await self.amax_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter=filter
        )

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: FilterSpec | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search_by_vector`, awaited (on the store's workers)."""
        return await self.store.run_in_worker(
            self.max_marginal_relevance_search_by_vector,
            embedding,
            k,
            fetch_k,
            lambda_mult,
            filter=filter,
            **kwargs,
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: FilterSpec | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """As :meth:`max_marginal_relevance_search`, from a query vector (candidates' vectors read back)."""
        _refuse_options(kwargs)
        hits = self._hits(embedding, fetch_k, filter)
        vectors = self.store.vectors(self._own, [hit.record.id for hit in hits])
        candidates = [hit for hit in hits if hit.record.id in vectors]
        chosen = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float32),
            [vectors[hit.record.id].tolist() for hit in candidates],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [_document(candidates[i].record) for i in chosen]

    def _select_relevance_score_fn(self) -> Any:
        # memcore scores are cosine similarities in [-1, 1]; LangChain's relevance is in [0, 1].
        return _relevance

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        store: Store | str = "memory://",
        scope: Scope | None = None,
        **kwargs: Any,
    ) -> MemcoreVectorStore:
        """A vector store on ``store`` (a store or a URL, opened here: close ``.store`` when done)
        within ``scope`` (required), holding ``texts``."""
        _refuse_options(kwargs)
        if scope is None:
            raise InvalidInputError("from_texts needs scope=: every memcore read and write is scoped")
        opened = open_store(store) if isinstance(store, str) else store
        vector_store = cls(opened, scope, embedding)
        vector_store.add_texts(texts, metadatas, ids=ids)
        return vector_store

    # -- internals --------------------------------------------------------------------------

    def _bind(self, dimension: int) -> None:
        self.store.bind_vector_space(VectorSpace(self._embedder_name, dimension))

    def _documents_filter(self, filter: FilterSpec | None = None) -> FilterSpec:
        """The documents (records of kind ``document``), matching ``filter`` if given."""
        if not filter:
            return {"kind": DOCUMENT_KIND}
        return {"$and": [{"kind": DOCUMENT_KIND}, _metadata_filter(filter, 0)]}

    def _stored(self, document_ids: list[str]) -> dict[str, list[MemoryRecord]]:
        """The records of the scope's documents with these ids, oldest first for each id."""
        found: dict[str, list[MemoryRecord]] = {}
        for start in range(0, len(document_ids), _IDS_PER_READ):
            chunk = _with_ids(document_ids[start : start + _IDS_PER_READ])
            for record in self.store.list(self._own, filter=chunk):
                document_id = record.metadata.get(ID_KEY)
                if isinstance(document_id, str):
                    found.setdefault(document_id, []).append(record)
        return found

    def _hits(self, vector: Sequence[float], k: int, filter: FilterSpec | None) -> list[ScoredRecord]:
        self._bind(len(vector))
        return self.store.search(
            self._own, vector=list(vector), filter=self._documents_filter(filter), limit=k
        )

    def _search(
        self, vector: Sequence[float], k: int, filter: FilterSpec | None
    ) -> list[tuple[Document, float]]:
        return [(_document(hit.record), hit.score) for hit in self._hits(vector, k, filter)]

    def _record(self, record_id: UUID, document_id: str, document: Document) -> MemoryRecord:
        metadata: dict[str, MetadataValue] = {}
        extra: dict[str, Any] = {}
        for key, value in document.metadata.items():
            if is_metadata_entry(key, value) and not str(key).startswith(RESERVED_PREFIX):
                metadata[key] = value
            else:
                extra[key] = value
        if extra:
            try:
                metadata[EXTRA_KEY] = json.dumps(extra)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"metadata of document {document_id!r} is not JSON: {exc}") from None
            except RecursionError:
                raise InvalidInputError(f"metadata of document {document_id!r} nests too deeply") from None
        metadata[ID_KEY] = document_id
        return MemoryRecord(
            id=record_id,
            scope=self.scope,
            message=Message(role="user", content=document.page_content),
            metadata=metadata,
            kind=DOCUMENT_KIND,
        )


def _document(record: MemoryRecord) -> Document:
    metadata: dict[str, Any] = {k: v for k, v in record.metadata.items() if not k.startswith(RESERVED_PREFIX)}
    extra = record.metadata.get(EXTRA_KEY)
    if isinstance(extra, str):
        try:
            kept = json.loads(extra)
        except (ValueError, RecursionError):
            kept = None  # not written by this adapter: the record's other metadata still comes back
        if isinstance(kept, dict):
            metadata.update(kept)
    document_id = record.metadata.get(ID_KEY)
    return Document(
        page_content=record.message.content,
        metadata=metadata,
        id=document_id if isinstance(document_id, str) else str(record.id),
    )


def _with_ids(document_ids: list[str]) -> FilterSpec:
    return {"$and": [{"kind": DOCUMENT_KIND}, {f"metadata.{ID_KEY}": {"$in": document_ids}}]}


def _metadata_filter(spec: FilterSpec, depth: int) -> FilterSpec:
    """A filter over document metadata keys as a memcore filter over ``metadata.<key>``."""
    if depth > MAX_DEPTH:
        raise FilterError(f"filters may nest at most {MAX_DEPTH} levels deep")
    if not isinstance(spec, dict):
        raise FilterError(f"a filter is a dict, got {type(spec).__name__}")
    translated: dict[str, Any] = {}
    for key, value in spec.items():
        if not isinstance(key, str):
            raise FilterError(f"filter keys are strings, got {key!r}")
        if key in _OPERATORS_WITH_SUBFILTERS and isinstance(value, list):
            translated[key] = [_metadata_filter(part, depth + 1) for part in value]
        elif key == "$not":
            translated[key] = _metadata_filter(value, depth + 1)
        elif key.startswith("$"):
            translated[key] = _shallow(value, depth)  # memcore's parser names what it does not know
        else:
            translated[f"metadata.{key}"] = _shallow(value, depth)
    return translated


def _shallow(value: Any, depth: int) -> Any:
    """``value``, once checked not to nest deeper than filters may (walked without recursion)."""
    pending = [(value, depth)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict | list | tuple):
            if level > MAX_DEPTH:
                raise FilterError(f"filters may nest at most {MAX_DEPTH} levels deep")
            pending.extend((part, level + 1) for part in (item.values() if isinstance(item, dict) else item))
    return value


def _relevance(score: float) -> float:
    return (score + 1.0) / 2.0


def _embedder_name(embedding: Embeddings) -> str:
    kind = type(embedding)
    model = getattr(embedding, "model", None) or getattr(embedding, "model_name", None)
    name = f"langchain:{kind.__module__}.{kind.__qualname__}"
    return f"{name}:{model}" if isinstance(model, str) else name


def _check_id(document_id: object) -> str:
    if not isinstance(document_id, str) or not document_id:
        raise InvalidInputError(f"a document id is a non-empty string, got {document_id!r}")
    try:
        document_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"a document id is valid Unicode text, got {document_id!r}") from None
    return document_id


def _identified(
    documents: list[Document], ids: list[str] | None, options: dict[str, Any]
) -> tuple[list[str], dict[str, Document]]:
    """The documents' ids (given, the document's own, or new), and the documents to write by id
    (the last of repeated ids wins, as with writing them one by one)."""
    _refuse_options(options)
    if ids is not None and len(ids) != len(documents):
        raise InvalidInputError(f"{len(ids)} ids for {len(documents)} documents")
    given: list[str | None] = list(ids) if ids is not None else [None] * len(documents)
    document_ids = [
        _check_id(i if i is not None else doc.id or str(uuid4()))
        for i, doc in zip(given, documents, strict=True)
    ]
    return document_ids, dict(zip(document_ids, documents, strict=True))


def _refuse_options(options: dict[str, Any]) -> None:
    if options:
        raise InvalidInputError(f"unsupported arguments: {', '.join(sorted(options))}")


__all__ = ["DOCUMENT_KIND", "MemcoreVectorStore"]
