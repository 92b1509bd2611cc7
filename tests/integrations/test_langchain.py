"""The LangChain adapter: LangChain's own standard vector-store tests, and memcore's scoping on top."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid5

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from memcore import open_store
from memcore.agent.memories import LongtermMemory
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import EmbedderMismatchError, FilterError, InvalidInputError
from memcore.integrations.langchain import MemcoreVectorStore
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Store, VectorSpace

SCOPE = Scope(tenant="acme", user_id="u1")


class TestOnMemoryStore(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self) -> Iterator[MemcoreVectorStore]:
        with open_store("memory://") as store:
            yield MemcoreVectorStore(store, SCOPE, self.get_embeddings())


class TestOnJsonlStore(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Iterator[MemcoreVectorStore]:
        with open_store(f"jsonl://{tmp_path}") as store:
            yield MemcoreVectorStore(store, SCOPE, self.get_embeddings())


@pytest.fixture()
def store() -> Iterator[Store]:
    with open_store("memory://") as opened:
        yield opened


def _docs(store: Store, scope: Scope) -> MemcoreVectorStore:
    return MemcoreVectorStore(store, scope, DeterministicFakeEmbedding(size=6))


def test_two_scopes_with_the_same_ids_never_see_or_delete_each_others_documents(store: Store) -> None:
    alice, bob = (
        _docs(store, Scope(tenant="acme", user_id="alice")),
        _docs(store, Scope(tenant="acme", user_id="bob")),
    )
    alice.add_documents([Document("alice's secret"), Document("alice's plan")], ids=["1", "2"])
    bob.add_documents([Document("bob's note")], ids=["1"])
    assert [d.page_content for d in bob.similarity_search("alice's secret", k=5)] == ["bob's note"]
    assert [d.page_content for d in bob.get_by_ids(["1", "2"])] == ["bob's note"]
    bob.delete(["1", "2"])
    bob.delete()
    assert sorted(d.page_content for d in alice.get_by_ids(["1", "2"])) == ["alice's plan", "alice's secret"]
    assert bob.similarity_search("note", k=5) == []


def test_a_wider_scope_sees_only_the_documents_written_through_it(store: Store) -> None:
    tenant, alice = _docs(store, Scope(tenant="acme")), _docs(store, Scope(tenant="acme", user_id="alice"))
    alice.add_documents([Document("alice's secret")], ids=["1"])
    tenant.add_documents([Document("company handbook")], ids=["1"])
    assert [d.page_content for d in tenant.similarity_search("alice's secret", k=5)] == ["company handbook"]
    assert [d.page_content for d in tenant.max_marginal_relevance_search("secret", k=5)] == [
        "company handbook"
    ]
    tenant.delete()
    assert [d.page_content for d in alice.get_by_ids(["1"])] == ["alice's secret"]


def test_max_marginal_relevance_prefers_diverse_documents(store: Store) -> None:
    docs = _docs(store, SCOPE)
    docs.add_texts(["kyoto", "kyoto", "kyoto", "pasta recipe"], ids=["a", "b", "c", "d"])
    relevant = docs.similarity_search("kyoto", k=2)
    assert [d.page_content for d in relevant] == ["kyoto", "kyoto"]
    diverse = docs.max_marginal_relevance_search("kyoto", k=2, fetch_k=4, lambda_mult=0.1)
    assert sorted(d.page_content for d in diverse) == ["kyoto", "pasta recipe"]
    retriever = docs.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4, "lambda_mult": 0.1})
    assert sorted(d.page_content for d in retriever.invoke("kyoto")) == ["kyoto", "pasta recipe"]


def test_the_agents_turns_in_the_scope_are_neither_returned_nor_deleted(store: Store) -> None:
    memory = LongtermMemory(store, HashEmbedder(dim=6), SCOPE)
    memory.write([Message(role="user", content="a turn, not a document")])
    docs = MemcoreVectorStore(
        store, SCOPE, DeterministicFakeEmbedding(size=6), embedder_name=HashEmbedder(dim=6).name
    )
    docs.add_documents([Document("a document")], ids=["d"])
    assert [d.page_content for d in docs.similarity_search("a turn, not a document", k=5)] == ["a document"]
    docs.delete()
    assert docs.get_by_ids(["d"]) == []
    assert [r.message.content for r in store.list(SCOPE)] == ["a turn, not a document"]


def test_metadata_round_trips_and_flat_entries_filter(store: Store) -> None:
    docs = _docs(store, SCOPE)
    nested = {
        "source": "notes",
        "page": 3,
        "tags": ["a", "b"],
        "author": {"name": "Ann"},
        "draft": None,
        "a.b": 1,
    }
    docs.add_documents([Document("kyoto trip", metadata=nested), Document("other", metadata={"page": 9})])
    (found,) = docs.similarity_search("kyoto trip", k=1, filter={"source": "notes"})
    assert found.metadata == nested
    assert [d.page_content for d in docs.similarity_search("x", k=5, filter={"page": {"$gt": 5}})] == [
        "other"
    ]
    either = {"$or": [{"page": 3}, {"$not": {"page": {"$lt": 5}}}]}
    assert len(docs.similarity_search("x", k=5, filter=either)) == 2
    with pytest.raises(FilterError):
        docs.similarity_search("x", filter={"page": {"$regex": "."}})


def test_a_document_id_can_be_any_string_and_is_kept(tmp_path: Path) -> None:
    ids = ["1", "doc/with/slashes", "ünïcode", "0b5e5b7e-8c2f-4d9b-b6a8-6c3b1f0d9a11"]
    with open_store(f"jsonl://{tmp_path}") as store:
        _docs(store, SCOPE).add_documents([Document(f"text {i}") for i in ids], ids=ids)
    with open_store(f"jsonl://{tmp_path}") as reopened:
        assert [d.id for d in _docs(reopened, SCOPE).get_by_ids(ids)] == ids


def test_retriever_and_relevance_scores(store: Store) -> None:
    docs = _docs(store, SCOPE)
    docs.add_texts(
        ["kyoto in october", "a marathon in june", "pasta recipe"], metadatas=[{"n": i} for i in range(3)]
    )
    retriever = docs.as_retriever(search_kwargs={"k": 1})
    assert [d.page_content for d in retriever.invoke("pasta recipe")] == ["pasta recipe"]
    scored = docs.similarity_search_with_relevance_scores("pasta recipe", k=3)
    assert scored[0][0].page_content == "pasta recipe" and scored[0][1] == pytest.approx(1.0)
    assert all(0.0 <= score <= 1.0 for _, score in scored)
    threshold = docs.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99}
    )
    assert [d.page_content for d in threshold.invoke("pasta recipe")] == ["pasta recipe"]


def test_from_texts_needs_a_scope_and_opens_a_url() -> None:
    embedding = DeterministicFakeEmbedding(size=6)
    with pytest.raises(InvalidInputError, match="scope"):
        MemcoreVectorStore.from_texts(["a"], embedding)
    docs = MemcoreVectorStore.from_texts(
        ["a", "b"], embedding, ids=["x", "y"], store="memory://", scope=SCOPE
    )
    try:
        assert [d.id for d in docs.similarity_search("b", k=1)] == ["y"]
    finally:
        docs.store.close()


def test_a_store_of_another_embedder_is_refused(store: Store) -> None:
    store.bind_vector_space(VectorSpace("minilm", 6))
    with pytest.raises(EmbedderMismatchError):
        _docs(store, SCOPE).add_documents([Document("a")])


def test_bad_arguments_are_typed_errors(store: Store) -> None:
    docs = _docs(store, SCOPE)
    with pytest.raises(InvalidInputError, match="2 ids for 1 documents"):
        docs.add_documents([Document("a")], ids=["1", "2"])
    with pytest.raises(InvalidInputError, match="non-empty string"):
        docs.add_documents([Document("a")], ids=[""])
    with pytest.raises(InvalidInputError, match="unsupported arguments: fetch_k"):
        docs.similarity_search("a", fetch_k=3)  # fetch_k belongs to max-marginal-relevance search
    with pytest.raises(InvalidInputError, match="not JSON"):
        docs.add_documents([Document("a", metadata={"when": object()})])
    assert store.count(SCOPE) == 0


def test_repeated_ids_in_one_batch_keep_the_last(store: Store) -> None:
    docs = _docs(store, SCOPE)
    assert docs.add_documents([Document("first"), Document("second")], ids=["1", "1"]) == ["1", "1"]
    assert [d.page_content for d in docs.get_by_ids(["1"])] == ["second"]


def _crafted(scope: Scope, marker: str, document_id: str, pretends: Scope) -> MemoryRecord:
    """A record another memory wrote in ``scope``, dressed as a document of an adapter on ``pretends``."""
    return MemoryRecord(
        scope=scope,
        message=Message(role="user", content=marker),
        kind="document",
        metadata={"lc_scope": pretends.digest(), "lc_id": document_id, "lc_extra": "{not json"},
    )


def test_records_of_other_scopes_are_never_read_or_deleted_whatever_their_metadata(store: Store) -> None:
    tenant, alice, agent = (
        Scope(tenant="acme"),
        Scope(tenant="acme", user_id="alice"),
        Scope(tenant="acme", user_id="alice", agent_id="coder"),
    )
    embedding = DeterministicFakeEmbedding(size=6)
    # Around alice's vector store: her tenant (a parent), her agent (a child), bob (a sibling).
    crafted = [
        _crafted(scope, f"crafted {i}", "1", pretends)
        for i, (scope, pretends) in enumerate(
            [(tenant, alice), (agent, alice), (Scope(tenant="acme", user_id="bob"), alice), (alice, tenant)]
        )
    ]
    store.bind_vector_space(
        VectorSpace(f"langchain:{type(embedding).__module__}.DeterministicFakeEmbedding", 6)
    )
    store.add(crafted, [embedding.embed_query("secret") for _ in crafted])
    for docs in (_docs(store, tenant), _docs(store, alice)):
        outside = [r for r in store.list(Scope(tenant="acme")) if r.scope != docs.scope]
        assert len(outside) >= 2  # a child and a sibling at least
        docs.add_documents([Document("own secret")], ids=["1"])
        vector = embedding.embed_query("secret")
        found = [
            *docs.similarity_search("secret", k=10),
            *(d for d, _ in docs.similarity_search_with_score("secret", k=10)),
            *(d for d, _ in docs.similarity_search_with_relevance_scores("secret", k=10)),
            *docs.similarity_search_by_vector(vector, k=10),
            *docs.max_marginal_relevance_search("secret", k=10, fetch_k=10),
            *docs.max_marginal_relevance_search_by_vector(vector, k=10, fetch_k=10),
            *docs.get_by_ids(["1"]),
            *asyncio.run(docs.asimilarity_search("secret", k=10)),
            *asyncio.run(docs.amax_marginal_relevance_search("secret", k=10, fetch_k=10)),
            *asyncio.run(docs.aget_by_ids(["1"])),
        ]
        assert {d.page_content for d in found} == {"own secret"}, docs.scope
        assert len(found) == 10
        docs.delete(["1"])
        assert docs.get_by_ids(["1"]) == []
        docs.add_documents([Document("own secret")], ids=["1"])
        docs.delete()
        docs.add_documents([Document("own secret")], ids=["1"])
        asyncio.run(docs.adelete(["1"]))
        assert docs.similarity_search("secret", k=10) == []
        # Outside the exact scope nothing was touched; a record in it is the scope's own document.
        assert store.get(Scope.everything(), [r.id for r in outside]) == outside


def _old_record_id(scope: Scope, document_id: str) -> UUID:
    """How record ids were derived before: public, so anyone could compute them."""
    return uuid5(UUID("6c1d9a0e-2f4b-5b8e-9a57-3c0f1e7d2b61"), f"{scope.digest()}/{document_id}")


def test_another_scope_can_neither_learn_nor_block_a_document_id(store: Store) -> None:
    alice_scope, bob_scope = Scope(tenant="acme", user_id="alice"), Scope(tenant="acme", user_id="bob")
    alice, bob = _docs(store, alice_scope), _docs(store, bob_scope)
    # bob claims the ids alice's "salary-2026" would get, before and after she adds it
    store.add(
        [
            MemoryRecord(
                id=_old_record_id(alice_scope, "salary-2026"),
                scope=bob_scope,
                message=Message(role="user", content="squatter"),
            )
        ]
    )
    alice.add_documents([Document("alice's salary")], ids=["salary-2026"])
    (stored,) = store.list(alice_scope.exact())
    assert stored.id != _old_record_id(alice_scope, "salary-2026")
    store.add(
        [
            MemoryRecord(
                id=_old_record_id(alice_scope, "salary-2027"),
                scope=bob_scope,
                message=Message(role="user", content="probe"),
            )
        ]
    )  # accepted: bob learns nothing of the ids alice uses
    bob.add_documents([Document("bob's own")], ids=["salary-2026"])
    # Upsert by document id within the scope keeps working, on the record it first got.
    alice.add_documents([Document("alice's new salary")], ids=["salary-2026"])
    assert [r.id for r in store.list(alice_scope.exact())] == [stored.id]
    assert [d.page_content for d in alice.get_by_ids(["salary-2026"])] == ["alice's new salary"]
    assert [d.page_content for d in bob.get_by_ids(["salary-2026"])] == ["bob's own"]
    # A second record of one id (two writers adding it at once) is folded on the next add.
    twin = stored.model_copy(update={"id": UUID(int=7)})
    store.add([twin])
    assert len(alice.get_by_ids(["salary-2026"])) == 1
    alice.add_documents([Document("folded")], ids=["salary-2026"])
    assert [r.message.content for r in store.list(alice_scope.exact())] == ["folded"]


def test_documents_stored_with_the_earlier_derived_ids_are_still_found_and_replaced(store: Store) -> None:
    docs = _docs(store, SCOPE)
    vector = DeterministicFakeEmbedding(size=6).embed_query("old")
    docs.add_documents([Document("x")], ids=["warmup"])  # binds the vector space
    old = MemoryRecord(
        id=_old_record_id(SCOPE, "1"),
        scope=SCOPE,
        message=Message(role="user", content="old"),
        kind="document",
        metadata={"lc_id": "1", "lc_scope": SCOPE.digest()},
    )
    store.add([old], [vector])
    assert [(d.id, d.page_content) for d in docs.get_by_ids(["1"])] == [("1", "old")]
    docs.add_documents([Document("new")], ids=["1"])
    assert [d.page_content for d in docs.get_by_ids(["1"])] == ["new"]
    assert store.get(SCOPE, [old.id])[0].message.content == "new"


def _nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {"page": 1}
    for _ in range(depth):
        value = {"$not": value}
    return value


def test_hostile_filters_metadata_and_ids_are_typed_errors(store: Store) -> None:
    docs = _docs(store, SCOPE)
    docs.add_documents([Document("a", metadata={"page": 1})], ids=["1"])
    deep_list: object = 1
    for _ in range(10_000):
        deep_list = [deep_list]
    deep_metadata: dict[str, object] = {}
    level = deep_metadata
    for _ in range(5_000):
        level["a"] = {}
        level = level["a"]  # type: ignore[assignment]
    for spec in (
        _nested(10_000),
        {"$and": [_nested(10_000)]},
        {"page": {"$in": deep_list}},
        {"page": deep_list},
    ):
        with pytest.raises(FilterError, match="nest"):
            docs.similarity_search("a", filter=spec)
    with pytest.raises(FilterError, match="keys are strings"):
        docs.similarity_search("a", filter={1: 2})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="nests too deeply"):
        docs.add_documents([Document("deep", metadata=deep_metadata)])
    for call in (
        lambda: docs.add_documents([Document("x")], ids=["\ud800"]),
        lambda: docs.add_documents([Document("x", id="\udfff")]),
        lambda: docs.get_by_ids(["\ud800"]),
        lambda: docs.delete(["\ud800"]),
    ):
        with pytest.raises(InvalidInputError, match="valid Unicode"):
            call()
    assert [d.id for d in docs.similarity_search("a", k=5, filter=_nested(31))] == []
    assert store.count(SCOPE) == 1


class AsyncOnlyEmbeddings(DeterministicFakeEmbedding):
    """Embeddings whose sync methods fail: the adapter's async methods must use the async API."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("an async method embedded synchronously")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("an async method embedded synchronously")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return [super(AsyncOnlyEmbeddings, self).embed_query(text) for text in texts]

    async def aembed_query(self, text: str) -> list[float]:
        return super().embed_query(text)


def test_async_methods_embed_with_the_async_api_and_use_the_stores_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open_store("memory://") as store:
        docs = MemcoreVectorStore(store, SCOPE, AsyncOnlyEmbeddings(size=16))
        offloaded: list[str] = []
        run_in_worker = store.run_in_worker

        async def counting(fn: object, *args: object, **kwargs: object) -> object:
            offloaded.append(getattr(fn, "__name__", "?"))
            return await run_in_worker(fn, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "run_in_worker", counting)

        async def main() -> list[Document]:
            await docs.aadd_documents([Document("alpha"), Document("beta")], ids=["a", "b"])
            found = await docs.asimilarity_search("alpha", k=1)
            found += await docs.amax_marginal_relevance_search("beta", k=1, fetch_k=2)
            found += await docs.aget_by_ids(["a"])
            await docs.adelete(["a", "b"])
            return found

        assert [d.page_content for d in asyncio.run(main())] == ["alpha", "beta", "alpha"]
        assert offloaded == [
            "_write",
            "_search",
            "max_marginal_relevance_search_by_vector",
            "get_by_ids",
            "delete",
        ]
        assert store.count(SCOPE) == 0
