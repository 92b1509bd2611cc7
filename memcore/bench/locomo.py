"""Retrieval quality on LoCoMo-format data: does recall find the turns a question's answer cites?

Each conversation's turns are written as records of one user, each session of the conversation a
memcore session (``"speaker: text"``, plus the image caption where there is one); each question with
evidence is recalled through a memory in each recall mode (dense, keyword, hybrid), and recall@k is
the share of the question's evidence turns among the top k, averaged per category
(1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial) and overall.

Evidence ids are repaired where unambiguous (``"D8:6; D9:17"`` is two ids, ``"D:11:26"`` is
``D11:26``, ``"D30:05"`` is ``D30:5``); ids that match no turn are dropped; both are counted.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from memcore.agent.memories import VectorMemory
from memcore.agent.policy import MemoryPolicy
from memcore.agent.recall import RecallMode
from memcore.bench.progress import Progress
from memcore.embedders.base import Embedder
from memcore.embedders.cache import cached
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.in_memory import InMemoryStore

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (1, 5, 10)
MODES: tuple[RecallMode, ...] = ("dense", "keyword", "hybrid")
_ID = re.compile(r"D:?(\d+):0*(\d+)")


def turn_text(turn: dict[str, Any]) -> str:
    """How a turn is stored: ``speaker: text``, and the image caption if the turn shares an image."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


def evidence_ids(raw: list[str], known: set[str], counts: dict[str, int]) -> list[str]:
    """The question's evidence turn ids, repaired where unambiguous; ``counts`` tallies repairs and drops."""
    found: list[str] = []
    for entry in raw:
        for piece in re.split(r"[;,\s]+", entry.strip()):
            if not piece:
                continue
            match = _ID.fullmatch(piece)
            normalised = f"D{match.group(1)}:{match.group(2)}" if match else piece
            if normalised != piece:
                counts["repaired"] += 1
            if normalised in known:
                found.append(normalised)
            else:
                counts["dropped"] += 1
    return list(dict.fromkeys(found))


def _sessions(conversation: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The conversation's sessions in order, as ``(session key, turns)``."""
    keys = sorted(
        (key for key in conversation if re.fullmatch(r"session_\d+", key)),
        key=lambda key: int(key.split("_")[1]),
    )
    return [(key, conversation[key]) for key in keys]


def _turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    return [turn for _, turns in _sessions(conversation) for turn in turns]


def _records(sample: dict[str, Any]) -> list[MemoryRecord]:
    """Each turn as a record of its session: LoCoMo sessions are memcore sessions of one user."""
    user = Scope(tenant="locomo", user_id=str(sample["sample_id"]))
    return [
        MemoryRecord(
            scope=user.model_copy(update={"session_id": key}),
            message=Message(role="user", content=turn_text(turn), name=turn["speaker"]),
            metadata={"dia_id": turn["dia_id"]},
        )
        for key, turns in _sessions(sample["conversation"])
        for turn in turns
    ]


def run_locomo(path: Path, embedder: Embedder, progress: Progress) -> dict[str, Any]:
    """Recall@1/5/10 per category and overall, and the recall latency, for each recall mode.

    Every conversation's turns are written once; each question is then recalled
    through a :class:`~memcore.agent.memories.VectorMemory` per mode (dense, keyword,
    hybrid) reaching all sessions of the conversation. The query's embedding is
    made before the clock starts (the memories share one cached embedder), so
    latencies are recall alone.
    """
    samples = json.loads(path.read_text())
    shared = cached(embedder)
    counts: dict[str, int] = defaultdict(int)
    hits: dict[str, dict[str, dict[int, list[float]]]] = {
        mode: defaultdict(lambda: {k: [] for k in KS}) for mode in MODES
    }
    latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
    for done, sample in enumerate(samples, 1):
        store = InMemoryStore()
        user = Scope(tenant="locomo", user_id=str(sample["sample_id"]))
        memories = {
            mode: VectorMemory(
                store, shared, user, policy=MemoryPolicy(limit=max(KS), reach="user", recall_mode=mode)
            )
            for mode in MODES
        }
        records = _records(sample)
        # Each session's turns lie below the user's memory: written through its recall block, whose
        # scope (the whole user, with this policy) they lie in.
        memories["dense"].recall_block.write_records(records)
        known = {str(record.metadata["dia_id"]) for record in records}
        for qa in sample["qa"]:
            evidence = evidence_ids(qa.get("evidence", []), known, counts)
            if not evidence:
                continue
            question = str(qa["question"])
            shared.embed([question])
            category = CATEGORIES.get(int(qa["category"]), str(qa["category"]))
            for mode, memory in memories.items():
                started = time.perf_counter()
                recalled = memory.retrieve(question)
                latencies[mode].append((time.perf_counter() - started) * 1_000)
                ranked = [str(item.record.metadata["dia_id"]) for item in recalled]
                for k in KS:
                    share = len(set(ranked[:k]) & set(evidence)) / len(evidence)
                    hits[mode][category][k].append(share)
                    hits[mode]["overall"][k].append(share)
        progress("conversations", done, len(samples))
    return {
        "questions": len(hits["dense"]["overall"][KS[0]]),
        "modes": {
            mode: {
                "recall": {
                    name: {f"recall@{k}": round(sum(v) / len(v), 4) for k, v in by_k.items() if v}
                    for name, by_k in hits[mode].items()
                },
                "recall_p50_ms": _median(latencies[mode]),
            }
            for mode in MODES
        },
        "evidence_repaired": counts["repaired"],
        "evidence_dropped": counts["dropped"],
        "embedder": embedder.name,
    }


def _median(values: list[float]) -> float | None:
    return round(sorted(values)[len(values) // 2], 3) if values else None
