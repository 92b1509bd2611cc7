"""The agent loop, end to end: what an agent framework pays memcore per turn.

Two agents share one store. Each writes its conversation as user + assistant
pairs (one ``write`` per pair, as an agent loop does), then answers questions,
each followed by ``get_context()``. The same loop runs on a plain reference (a
Python list and a numpy matrix, the same embedder, the same window and recall
limit), so the ratio of turns per second says what memcore adds on top of
embedding, which dominates.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from memcore.bench.timing import summary
from memcore.bench.workloads import opened
from memcore.embedders.base import Embedder
from memcore.memories import LongtermMemory
from memcore.records import Message
from memcore.scope import Scope
from memcore.validation import normalize_rows

WORDS = [
    "trip",
    "kyoto",
    "flight",
    "meal",
    "vegetarian",
    "peanut",
    "window",
    "seat",
    "marathon",
    "knee",
    "coach",
    "budget",
    "hotel",
    "museum",
    "daughter",
    "birthday",
    "june",
    "october",
    "train",
    "ticket",
    "weather",
    "umbrella",
    "recipe",
    "pasta",
    "garden",
    "tomato",
    "book",
    "novel",
    "chapter",
]
WINDOW, RECALL = 20, 5


def conversation(agent: int, pairs: int, seed: int) -> list[tuple[str, str]]:
    """``pairs`` synthetic (user, assistant) turns for one agent, reproducible."""
    rng = np.random.default_rng(seed + agent)
    turns = []
    for i in range(pairs):
        words = " ".join(rng.choice(WORDS, 6))
        turns.append((f"turn {i} of agent {agent}: {words}?", f"noted {i}: {words}."))
    return turns


class ReferenceMemory:
    """The floor for the agent loop: a list and a growing numpy matrix, no scope, no durability."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.messages: list[str] = []
        self.vectors = np.zeros((0, embedder.dim), dtype=np.float32)

    def write(self, texts: list[str]) -> None:
        vectors = normalize_rows(np.asarray(self.embedder.embed(texts), dtype=np.float32))
        self.messages += texts
        self.vectors = np.concatenate([self.vectors, vectors])

    def get_context(self) -> list[str]:
        latest_user = self.messages[-2]
        query = normalize_rows(np.asarray(self.embedder.embed([latest_user]), dtype=np.float32))[0]
        scores = self.vectors @ query
        best = np.argsort(-scores)[:RECALL]
        return [self.messages[i] for i in best] + self.messages[-WINDOW:]


def _timed_contexts(memories: list[LongtermMemory], questions: list[str]) -> list[float]:
    """Milliseconds of ``get_context()`` after each question is written (the write is not timed)."""
    samples = []
    for i, question in enumerate(questions):
        memory = memories[i % 2]
        memory.write([Message(role="user", content=question)])
        started = time.perf_counter()
        memory.get_context()
        samples.append((time.perf_counter() - started) * 1_000)
    return samples


def run_agent_loop(url: str, embedder: Embedder, turns: int, questions: int, seed: int = 0) -> dict[str, Any]:
    """Write ``turns`` turns (two agents, in pairs) then ask ``questions``; memcore against the reference."""
    pairs = turns // 4
    chats = [conversation(agent, pairs, seed) for agent in (0, 1)]
    with opened(url) as store:
        memories = [
            LongtermMemory(
                store, embedder, Scope(tenant="bench", user_id="u", agent_id=f"agent-{a}", session_id="s")
            )
            for a in (0, 1)
        ]
        started = time.perf_counter()
        for pair in range(pairs):
            for memory, chat in zip(memories, chats, strict=True):
                user, assistant = chat[pair]
                memory.write(
                    [Message(role="user", content=user), Message(role="assistant", content=assistant)]
                )
        memcore_seconds = time.perf_counter() - started
        asked = [
            f"question {q}: " + " ".join(WORDS[q % len(WORDS) : q % len(WORDS) + 4]) for q in range(questions)
        ]

        contexts = summary(_timed_contexts(memories, asked))
    references = [ReferenceMemory(embedder), ReferenceMemory(embedder)]
    started = time.perf_counter()
    for pair in range(pairs):
        for reference, chat in zip(references, chats, strict=True):
            reference.write(list(chat[pair]))
    reference_seconds = time.perf_counter() - started
    written = pairs * 4
    return {
        "store": url,
        "turns": written,
        "turns_per_s": round(written / memcore_seconds, 1),
        "reference_turns_per_s": round(written / reference_seconds, 1),
        "write_ratio": round(reference_seconds / memcore_seconds, 3),
        "get_context": contexts,
    }
