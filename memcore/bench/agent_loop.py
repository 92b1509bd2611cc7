"""The agent loop, end to end: what an agent framework pays memcore per turn.

Two agents share one store. Each writes its conversation as user + assistant
pairs (one ``write`` per pair, as an agent loop does), then answers questions,
each followed by ``get_context()``. Every write is also done on a plain
reference (a Python list and a numpy matrix, the same embedder), interleaved
with memcore's, so the ratio of turns per second says what memcore adds on top
of embedding, which dominates, even on a noisy machine.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from memcore.agent.memories import LongtermMemory
from memcore.agent.policy import MemoryPolicy
from memcore.agent.recall import RecallMode, resolved_mode
from memcore.bench.progress import Progress
from memcore.bench.timing import summary
from memcore.bench.workloads import opened
from memcore.embedders.base import Embedder
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
    """The floor for the agent loop: a list and a numpy matrix, no scope, no durability.

    The matrix grows by doubling, as a careful hand-written loop would, so the
    reference never pays a quadratic copy that would flatter memcore's ratio.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.messages: list[str] = []
        self._vectors = np.zeros((1024, embedder.dim), dtype=np.float32)

    def write(self, texts: list[str]) -> None:
        vectors = normalize_rows(np.asarray(self.embedder.embed(texts), dtype=np.float32))
        size = len(self.messages)
        if size + len(texts) > len(self._vectors):
            grown = np.zeros((2 * (size + len(texts)), self.embedder.dim), dtype=np.float32)
            grown[:size] = self._vectors[:size]
            self._vectors = grown
        self._vectors[size : size + len(texts)] = vectors
        self.messages += texts

    def get_context(self) -> list[str]:
        """The recent window and the best matches of the latest message (a question just written,
        whose vector is reused as memcore reuses it from its embedding cache)."""
        size = len(self.messages)
        scores = self._vectors[:size] @ self._vectors[size - 1]
        best = np.argpartition(-scores, RECALL)[:RECALL] if size > RECALL else np.arange(size)
        return [self.messages[i] for i in best] + self.messages[-WINDOW:]


def _timed_contexts(
    memories: list[LongtermMemory],
    references: list[ReferenceMemory],
    questions: list[str],
    progress: Progress,
) -> tuple[list[float], list[float]]:
    """Milliseconds of ``get_context()`` after each question is written (the write is not timed),
    on memcore and on the reference."""
    ours, theirs = [], []
    for i, question in enumerate(questions):
        memory, reference = memories[i % 2], references[i % 2]
        memory.write([Message(role="user", content=question)])
        reference.write([question])
        started = time.perf_counter()
        memory.get_context()
        ours.append((time.perf_counter() - started) * 1_000)
        started = time.perf_counter()
        reference.get_context()
        theirs.append((time.perf_counter() - started) * 1_000)
        progress("agent loop: questions", i + 1, len(questions))
    return ours, theirs


def run_agent_loop(
    url: str,
    embedder: Embedder,
    turns: int,
    questions: int,
    progress: Progress,
    seed: int = 0,
    recall_mode: RecallMode = "auto",
) -> dict[str, Any]:
    """Write ``turns`` turns (two agents, in pairs) then ask ``questions``; memcore against the reference.

    :param recall_mode: the memories' :attr:`MemoryPolicy.recall_mode` (``auto``: the store's default).
    """
    pairs = turns // 4
    chats = [conversation(agent, pairs, seed) for agent in (0, 1)]
    with opened(url) as store:
        memories = [
            LongtermMemory(
                store,
                embedder,
                Scope(tenant="bench", user_id="u", agent_id=f"agent-{a}", session_id="s"),
                policy=MemoryPolicy(recall_mode=recall_mode),
            )
            for a in (0, 1)
        ]
        references = [ReferenceMemory(embedder), ReferenceMemory(embedder)]
        seconds = {"memcore": 0.0, "reference": 0.0}
        for pair in range(pairs):
            for memory, reference, chat in zip(memories, references, chats, strict=True):
                user, assistant = chat[pair]
                messages = [Message(role="user", content=user), Message(role="assistant", content=assistant)]
                # Interleaved, the side going first alternating: the ratio survives a noisy machine.
                for side in ("reference", "memcore") if pair % 2 else ("memcore", "reference"):
                    started = time.perf_counter()
                    if side == "memcore":
                        memory.write(messages)
                    else:
                        reference.write([user, assistant])
                    seconds[side] += time.perf_counter() - started
            progress("agent loop: write", pair + 1, pairs)
        asked = [
            f"question {q}: " + " ".join(WORDS[q % len(WORDS) : q % len(WORDS) + 4]) for q in range(questions)
        ]
        ours, theirs = _timed_contexts(memories, references, asked, progress)
    written = pairs * 4
    return {
        "store": url,
        "recall": resolved_mode(recall_mode, store),
        "turns": written,
        "turns_per_s": round(written / seconds["memcore"], 1),
        "reference_turns_per_s": round(written / seconds["reference"], 1),
        "write_ratio": round(seconds["reference"] / seconds["memcore"], 3),
        "get_context": summary(ours),
        "reference_get_context": summary(theirs),
    }
