"""Retrieval quality on LoCoMo-format data: does recall find the turns a question's answer cites?

Each conversation's turns are written as records of one scope (``"speaker: text"``, plus the image
caption where there is one); each question with evidence is recalled through a memory, and
recall@k is the share of the question's evidence turns among the top k, averaged per category
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

from memcore.bench.progress import Progress
from memcore.embedders.base import Embedder
from memcore.memories import VectorMemory
from memcore.policy import MemoryPolicy
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.stores.memory import MemoryStore

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (1, 5, 10)
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


def _turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    sessions = sorted(
        (key for key in conversation if re.fullmatch(r"session_\d+", key)),
        key=lambda key: int(key.split("_")[1]),
    )
    return [turn for key in sessions for turn in conversation[key]]


def run_locomo(path: Path, embedder: Embedder, progress: Progress) -> dict[str, Any]:
    """Recall@1/5/10 per category and overall, and the recall latency, over every conversation in ``path``."""
    samples = json.loads(path.read_text())
    counts: dict[str, int] = defaultdict(int)
    hits: dict[str, dict[int, list[float]]] = defaultdict(lambda: {k: [] for k in KS})
    latencies: list[float] = []
    for done, sample in enumerate(samples, 1):
        scope = Scope(tenant="locomo", user_id=str(sample["sample_id"]))
        memory = VectorMemory(
            MemoryStore(), embedder, scope, policy=MemoryPolicy(limit=max(KS), scope="session")
        )
        turns = _turns(sample["conversation"])
        records = [
            MemoryRecord(
                scope=scope,
                message=Message(role="user", content=turn_text(t)),
                metadata={"dia_id": t["dia_id"]},
            )
            for t in turns
        ]
        memory.write_records(records)
        known = {turn["dia_id"] for turn in turns}
        for qa in sample["qa"]:
            evidence = evidence_ids(qa.get("evidence", []), known, counts)
            if not evidence:
                continue
            started = time.perf_counter()
            recalled = memory.retrieve(str(qa["question"]))
            latencies.append((time.perf_counter() - started) * 1_000)
            ranked = [str(item.record.metadata["dia_id"]) for item in recalled]
            category = CATEGORIES.get(int(qa["category"]), str(qa["category"]))
            for k in KS:
                share = len(set(ranked[:k]) & set(evidence)) / len(evidence)
                hits[category][k].append(share)
                hits["overall"][k].append(share)
        progress("conversations", done, len(samples))
    latencies.sort()
    return {
        "questions": len(hits["overall"][KS[0]]),
        "recall": {
            name: {f"recall@{k}": round(sum(v) / len(v), 4) for k, v in by_k.items() if v}
            for name, by_k in hits.items()
        },
        "recall_p50_ms": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "evidence_repaired": counts["repaired"],
        "evidence_dropped": counts["dropped"],
        "embedder": embedder.name,
    }
