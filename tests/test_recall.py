"""Keyword ranking (BM25) and hybrid recall on small fixtures."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar
from uuid import uuid4

import pytest

from memcore.agent.memories import VectorMemory
from memcore.agent.policy import MemoryPolicy
from memcore.agent.recall import HybridRecall
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import InvalidInputError
from memcore.keywords import _stem, bm25_scores, terms
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import Capabilities
from memcore.stores.in_memory import InMemoryStore


def test_terms_drop_stop_words_and_possessives_and_stem() -> None:
    assert terms("What did Caroline's kids like about the books?") == ["carolin", "kid", "like", "book"]
    assert terms("glass class") == ["glass", "class"], "a double s is not a plural"
    assert terms("painting painted paints") == ["paint"] * 3
    assert terms("Adopted? adoption!") == ["adopt", "adopt"]


def test_stemming_from_many_threads_gives_the_same_stems() -> None:
    words = [
        f"{stem}{suffix}{n}"
        for n in range(300)
        for stem in ("run", "adopt", "paint")
        for suffix in ("ing", "ed")
    ]
    expected = [_stem.__wrapped__(word) for word in words]
    _stem.cache_clear()
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(3):
            assert list(pool.map(_stem, words)) == expected


def test_a_stemmed_query_finds_other_forms_of_its_words() -> None:
    scores = bm25_scores("When did she adopt the dogs?", ["adopted a dog in May", "went to the beach"])
    assert scores[0] > 0 and scores[1] == 0


def test_bm25_matches_the_formula() -> None:
    documents = ["pottery class", "pottery pottery workshop", "beach"]
    scores = bm25_scores("pottery", documents)
    average = (2 + 3 + 1) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def expected(tf: int, length: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))

    assert scores == pytest.approx([expected(1, 2), expected(2, 3), 0.0])


def _conversation(store: InMemoryStore, user: Scope) -> list[MemoryRecord]:
    turns = [
        ("s1", "Did you finally book the trip to Norway?"),
        ("s1", "Yes! Oslo in June, flights are paid."),
        ("s1", "Lovely weather there in summer."),
        ("s2", "My pottery class starts on Monday."),
        ("s2", "Send pictures of the bowls!"),
    ]
    records = [
        MemoryRecord(scope=user.model_copy(update={"session_id": s}), message=Message(role="user", content=t))
        for s, t in turns
    ]
    for record in records:  # each session's turns through that session's own memory
        session = VectorMemory(store, HashEmbedder(dim=64), record.scope, policy=MemoryPolicy(reach="user"))
        session.write_records([record])
    return records


def _recall(store: InMemoryStore, user: Scope, mode: str, query: str) -> list[str]:
    policy = MemoryPolicy(reach="user", recall_mode=mode, limit=3)  # type: ignore[arg-type]
    memory = VectorMemory(store, HashEmbedder(dim=64), user, policy=policy)
    return [hit.record.message.content for hit in memory.retrieve(query)]


def test_hybrid_brings_in_the_reply_next_to_a_matched_turn() -> None:
    store, user = InMemoryStore(), Scope(tenant="t", user_id="u")
    _conversation(store, user)
    question = "Where is the Norway trip going?"
    keyword = _recall(store, user, "keyword", question)
    assert keyword == ["Did you finally book the trip to Norway?"], "only one turn shares a word"
    hybrid = _recall(store, user, "hybrid", question)
    assert hybrid[:2] == ["Did you finally book the trip to Norway?", "Yes! Oslo in June, flights are paid."]


def test_hybrid_reads_nothing_outside_the_memory_scope() -> None:
    store, user = InMemoryStore(), Scope(tenant="t", user_id="u")
    other = Scope(tenant="t", user_id="someone-else")
    _conversation(store, user)
    _conversation(store, other)
    for mode in ("dense", "keyword", "hybrid"):
        policy = MemoryPolicy(reach="user", recall_mode=mode, limit=10)  # type: ignore[arg-type]
        memory = VectorMemory(store, HashEmbedder(dim=64), user, policy=policy)
        assert {hit.record.scope.user_id for hit in memory.retrieve("Norway trip pottery")} == {"u"}


@pytest.mark.parametrize(("speaker_weight", "first"), [(0.3, "Mel"), (0.0, "Jon")])
def test_hybrid_favours_the_speaker_the_query_names(speaker_weight: float, first: str) -> None:
    store, user = InMemoryStore(), Scope(tenant="t", user_id="u")
    said = [("s1", "Jon"), ("s2", "Mel"), ("s3", None)]  # the same words, in separate sessions
    records = [
        MemoryRecord(
            scope=user.model_copy(update={"session_id": session}),
            message=Message(role="user", content="I love painting sunsets.", name=name),
        )
        for session, name in said
    ]
    settings = HybridRecall(speaker_weight=speaker_weight)
    policy = MemoryPolicy(reach="user", recall_mode="hybrid", limit=3, hybrid=settings)
    for record in records:
        VectorMemory(store, HashEmbedder(dim=64), record.scope, policy=policy).write_records([record])
    memory = VectorMemory(store, HashEmbedder(dim=64), user, policy=policy)
    hits = memory.retrieve("What does mel love painting?")
    assert len(hits) == 3
    assert hits[0].record.message.name == first, "without the weight, ties go to the older record"


class _ScanningStore(InMemoryStore):
    capabilities: ClassVar[Capabilities] = Capabilities(durable=False)


@pytest.mark.parametrize(("store", "mode"), [(InMemoryStore(), "hybrid"), (_ScanningStore(), "dense")])
def test_auto_recall_is_the_store_default(store: InMemoryStore, mode: str) -> None:
    memory = VectorMemory(store, HashEmbedder(dim=64), Scope(tenant="t", user_id="u"))
    assert memory.policy.recall_mode == "auto"
    assert memory.recall_block.mode == mode


def test_hybrid_settings_are_validated() -> None:
    with pytest.raises(InvalidInputError):
        HybridRecall(dense_weight=1.5)
    with pytest.raises(InvalidInputError):
        MemoryPolicy(recall_mode="fuzzy")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["dense", "keyword", "hybrid"])
def test_recall_over_many_users_keeps_two_records_of_one_id_apart(mode: str) -> None:
    store, tenant = InMemoryStore(), Scope(tenant="t")
    alice = Scope(tenant="t", user_id="alice", session_id="s1")
    bob = Scope(tenant="t", user_id="bob", session_id="s1")
    shared_id = uuid4()
    for scope, content in ((alice, "alice paints sunsets"), (bob, "bob paints harbours")):
        record = MemoryRecord(id=shared_id, scope=scope, message=Message(role="user", content=content))
        VectorMemory(store, HashEmbedder(dim=64), scope).write_records([record])
    policy = MemoryPolicy(reach="tenant", recall_mode=mode, limit=5)  # type: ignore[arg-type]
    memory = VectorMemory(store, HashEmbedder(dim=64), tenant, policy=policy)

    hits = memory.retrieve("who paints sunsets and harbours")

    assert sorted((h.record.scope.user_id, h.record.message.content) for h in hits) == [
        ("alice", "alice paints sunsets"),
        ("bob", "bob paints harbours"),
    ], "each user's record keeps its own scope, content and score"


@pytest.mark.parametrize("mode", ["dense", "keyword", "hybrid"])
async def test_a_blocks_async_recall_answers_as_its_sync_recall(mode: str) -> None:
    from memcore.agent.blocks import VectorBlock
    from memcore.embedders.cache import cached

    store, embedder = InMemoryStore(), cached(HashEmbedder())
    scope = Scope(tenant="t", user_id="u", agent_id="a", session_id="s")
    block = VectorBlock(store, embedder, scope, mode=mode)  # type: ignore[arg-type]
    facts = ["my cat is called Mochi", "I fly to Lyon on Monday", "peanuts make me ill"]
    block.write_records([MemoryRecord(scope=scope, message=Message(role="user", content=f)) for f in facts])
    for query, text in [("what is my cat called", None), ("travel plans", "Lyon"), (None, "peanuts")]:
        expected = block.retrieve(query, text=text, limit=2)
        assert await block.aretrieve(query, text=text, limit=2) == expected
    with pytest.raises(InvalidInputError):
        await block.aretrieve("   ")
