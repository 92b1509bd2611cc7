"""Conversation turns are stored with the previous turn of their session mixed into their vector."""

from __future__ import annotations

import numpy as np
import pytest

from memcore.blocks import VectorBlock
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import InvalidInputError
from memcore.memories import VectorMemory
from memcore.policy import MemoryPolicy
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.memory import MemoryStore
from memcore.validation import Matrix, normalize_rows

EMBEDDER = HashEmbedder(dim=1024)
USER = Scope(tenant="t", user_id="u")


def _turn(content: str, session: str | None = "s1", role: str = "user") -> MemoryRecord:
    scope = USER.model_copy(update={"session_id": session})
    return MemoryRecord(scope=scope, message=Message(role=role, content=content))


def _plain(text: str) -> Matrix:
    return EMBEDDER.embed([text])[0:1]


def _stored_similarity(store: MemoryStore, record: MemoryRecord, expected: Matrix) -> float:
    """The cosine similarity between ``record``'s stored vector and ``expected`` (one row)."""
    hits = store.search(record.scope, vector=expected[0], limit=100)
    return next(hit.score for hit in hits if hit.record.id == record.id)


def _mixed(own: str, previous: str, weight: float = 0.3) -> Matrix:
    return normalize_rows(_plain(own) + np.float32(weight) * _plain(previous))


def test_a_turn_carries_the_turn_before_it_in_the_batch_and_in_the_store() -> None:
    store = MemoryStore()
    block = VectorBlock(store, EMBEDDER, USER)
    question, reply = _turn("Did you book the trip to Norway?"), _turn("Yes, Oslo in June.")
    block.write_records([question, reply])
    later = _turn("Flights are paid too.")
    block.write_records([later])
    assert _stored_similarity(store, question, _plain(question.message.content)) == pytest.approx(1.0)
    assert _stored_similarity(store, reply, _mixed("Yes, Oslo in June.", question.message.content)) == (
        pytest.approx(1.0, abs=1e-5)
    )
    assert _stored_similarity(store, later, _mixed("Flights are paid too.", reply.message.content)) == (
        pytest.approx(1.0, abs=1e-5)
    ), "the previous turn's own embedding, not its stored vector, so context does not pile up"


def test_sessionless_records_other_sessions_and_other_roles_give_and_take_nothing() -> None:
    store = MemoryStore()
    block = VectorBlock(store, EMBEDDER, USER)
    prompt = _turn("You are a travel agent.", role="system")
    first = _turn("Book me a trip to Norway.")
    elsewhere = _turn("My pottery class starts Monday.", session="s2")
    loose = _turn("A note without a session.", session=None)
    block.write_records([prompt, first, elsewhere, loose])
    for record in (prompt, first, elsewhere, loose):
        assert _stored_similarity(store, record, _plain(record.message.content)) == pytest.approx(1.0)


def test_a_reply_is_recalled_by_the_question_it_answers() -> None:
    def reply_score(weight: float) -> float:
        store = MemoryStore()
        policy = MemoryPolicy(scope="user", limit=4, previous_turn_weight=weight)
        memory = VectorMemory(store, EMBEDDER, USER, policy=policy)
        memory.write_records(
            [
                _turn("Where are you travelling this summer?"),
                _turn("Oslo, in June!", role="assistant"),
                _turn("Did the pottery class go well?", session="s2"),
                _turn("The bowls cracked in the kiln.", session="s2", role="assistant"),
            ]
        )
        hits = memory.retrieve("summer travelling plans")
        return next(hit.score for hit in hits if hit.record.message.content == "Oslo, in June!")

    plain, in_context = reply_score(0.0), reply_score(0.3)
    assert plain < 0.1, "the reply shares no word with the query: only hash collisions"
    assert in_context > plain + 0.1


def test_the_weight_is_validated() -> None:
    with pytest.raises(InvalidInputError):
        MemoryPolicy(previous_turn_weight=1.5)
    with pytest.raises(InvalidInputError):
        VectorBlock(MemoryStore(), EMBEDDER, USER, previous_turn_weight=-0.1)
