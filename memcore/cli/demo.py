"""``memcore demo``: two agents, three sessions, two process restarts, on the embedded default.

Phase 1 writes the conversations; phases 2 and 3 run in fresh processes (a real
restart), so everything they show was read back from disk. Phase 3 ends with the lifecycle: a
note that consolidates instead of piling up, and a memory that expires (the store's clock is
moved forward, as the tests do, rather than waiting hours).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import memcore
from memcore.agent.memories import LongtermMemory
from memcore.records import Message
from memcore.scope import Scope

EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"
TENANT, USER = "demo", "alice"
TRAVEL = Scope(tenant=TENANT, user_id=USER, agent_id="travel-agent", session_id="trip-planning")
TRAVEL_LATER = TRAVEL.model_copy(update={"session_id": "booking-day"})
COACH = Scope(tenant=TENANT, user_id=USER, agent_id="running-coach", session_id="week-1")

TRAVEL_CHAT = [
    ("system", "You are Alice's travel agent. Use what you remember about her."),
    ("user", "I'm planning a trip to Kyoto in April with my daughter Lea."),
    ("assistant", "Lovely! Cherry blossom season. How old is Lea?"),
    ("user", "She turns seven in June. Also, I am vegetarian and severely allergic to peanuts."),
    ("assistant", "Noted: vegetarian meals, and no peanuts anywhere."),
    ("user", "I always want a window seat, and I hate layovers in Frankfurt."),
    ("assistant", "Window seats and no Frankfurt connections. Got it."),
]
COACH_CHAT = [
    ("system", "You are Alice's running coach."),
    ("user", "My goal is a marathon under four hours in October."),
    ("assistant", "Then we build up to 60 km weeks by August."),
    ("user", "My left knee hurts after long downhill runs."),
    ("assistant", "We'll keep downhill work short and add strength sessions."),
]
QUESTION = "Please order my in-flight meal for the Kyoto flight."


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``demo`` command to the ``memcore`` parser."""
    parser = subparsers.add_parser(
        "demo",
        help="a scripted multi-agent, multi-session conversation with real embeddings",
        description="Two agents share one store; sessions survive a process restart; a forgotten fact "
        "disappears from every read path; the token budget holds.",
    )
    parser.add_argument("--store", help="store URL (default: jsonl:// in a temporary folder)")
    parser.add_argument("--embedder", default=EMBEDDER, help=f"embedder name (default: {EMBEDDER})")
    parser.add_argument(
        "--phase", choices=("all", "recall", "after-forget"), default="all", help=argparse.SUPPRESS
    )
    parser.set_defaults(run=run)


def _heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 74 - len(text)))


def _say(memory: LongtermMemory, turns: list[tuple[str, str]]) -> None:
    for role, content in turns:
        memory.write([Message.model_validate({"role": role, "content": content})])
        print(f"  [{memory.scope.agent_id}/{memory.scope.session_id}] {role:>9}: {content}")


def _show_context(messages: list[dict[str, Any]], tokens: int, limit: int) -> None:
    for message in messages:
        print(f"    {message['role']:>9}: {message['content']}")
    print(f"  -> {len(messages)} messages, {tokens} tokens (budget {limit})")


def _phase_write(url: str, embedder_name: str) -> None:
    _heading("Phase 1: two agents, one store")
    embedder = memcore.open_embedder(embedder_name)
    with memcore.open_store(url) as store:
        _say(LongtermMemory(store, embedder, TRAVEL), TRAVEL_CHAT)
        _say(LongtermMemory(store, embedder, COACH), COACH_CHAT)
        print(f"  {store.count(Scope(tenant=TENANT))} records written to {url}")


def _phase_recall(url: str, embedder_name: str) -> None:
    _heading("Phase 2: a new process, a new session (long-term recall after restart)")
    embedder = memcore.open_embedder(embedder_name)
    with memcore.open_store(url) as store:
        travel = LongtermMemory(store, embedder, TRAVEL_LATER, window=4)
        _say(travel, [TRAVEL_CHAT[0], ("user", QUESTION)])
        messages, tokens = travel.get_context(1_000)
        print("  the travel agent's context for its next model call:")
        _show_context(messages, tokens, 1_000)

        _heading("The coach shares the store but sees none of the travel agent's memories")
        coach = LongtermMemory(store, embedder, COACH.model_copy(update={"session_id": "week-2"}))
        recalled = [item.record for item in coach.retrieve(QUESTION) if item.source == "recall"]
        print(f"  coach recalls for the same question: {[r.message.content for r in recalled]}")
        print(f"  any travel memory among them: {any(r.scope.agent_id != 'running-coach' for r in recalled)}")

        _heading("Forget a fact by its records' UUIDs")
        facts = [hit.record for hit in store.search(travel.recall_scope, text="peanut")]
        for fact in facts:
            print(f"  forgetting {fact.id}: {fact.message.content!r}")
        ids = [fact.id for fact in facts]
        print(f"  the coach tries first: {coach.forget(ids)} deleted")
        print(f"  the travel agent: {travel.forget(ids)} deleted")
        _show_read_paths(store, travel, ids)

        _heading("The token budget holds")
        for limit in (400, 150, 60):
            messages, tokens = travel.get_context(limit)
            print(
                f"  budget {limit:>4}: {tokens:>4} tokens, {len(messages)} messages, system first: "
                f"{messages[0]['role'] == 'system'}"
            )


def _show_read_paths(store: memcore.Store, memory: LongtermMemory, ids: list[Any]) -> None:
    scope = memory.recall_scope
    print(f"    get by id    -> {store.get(scope, ids)}")
    print(f"    list         -> {[r.message.content for r in store.list(scope) if r.id in ids]}")
    print(f"    text search  -> {[h.record.message.content for h in store.search(scope, text='peanut')]}")
    recalled = [i.record.message.content for i in memory.retrieve("peanut allergy")]
    print(f"    recall       -> {[content for content in recalled if 'peanut' in content]}")
    messages, _ = memory.get_context()
    print(f"    get_context  -> {[m['content'] for m in messages if 'peanut' in m['content']]}")


def _phase_after_forget(url: str, embedder_name: str) -> None:
    _heading("Phase 3: another restart; the forgotten fact stays gone")
    embedder = memcore.open_embedder(embedder_name)
    with memcore.open_store(url) as store:
        travel = LongtermMemory(store, embedder, TRAVEL_LATER)
        peanut = [r.message.content for r in store.list(travel.recall_scope) if "peanut" in r.message.content]
        print(f"  records mentioning peanuts: {peanut}")
        recalled = [
            i.record.message.content for i in travel.retrieve("meal preferences") if i.source == "recall"
        ]
        print(f"  recall for 'meal preferences': {recalled}")
        _show_lifecycle(store, travel)
        store.purge()
        print("  purged: deleted and expired records are gone from the files on disk too")


def _show_lifecycle(store: memcore.Store, travel: LongtermMemory) -> None:
    _heading("Notes consolidate; memories expire")
    first = travel.remember("Alice's passport expires in May 2027.")
    again = travel.remember("Alice's passport expires in May 2027")
    notes = store.count(travel.recall_scope, filter={"kind": "note"})
    print(f"  remembered twice: same note {again.id == first.id}, notes stored: {notes}")
    gate = travel.remember("Boarding at gate B12, 14:05 today.", ttl=timedelta(hours=2))
    print(f"  a note for two hours: {gate.message.content!r}, expires {gate.expires_at:%H:%M} UTC")
    print(f"  recall for 'which gate': {_recalled(travel, 'which gate do I board at', 'gate')}")
    later = store.now() + timedelta(hours=3)
    store.clock = lambda: later
    print("  three hours later (the store's clock moved forward):")
    print(f"    recall for 'which gate': {_recalled(travel, 'which gate do I board at', 'gate')}")
    print(f"    get by id: {store.get(travel.recall_scope, [gate.id])}")
    print(f"    swept: {store.sweep()} expired record deleted")


def _recalled(memory: LongtermMemory, query: str, word: str) -> list[str]:
    return [i.record.message.content for i in memory.retrieve(query) if word in i.record.message.content]


def _restart(url: str, embedder_name: str, phase: str) -> None:
    command = [
        sys.executable,
        "-m",
        "memcore",
        "demo",
        "--store",
        url,
        "--embedder",
        embedder_name,
        "--phase",
        phase,
    ]
    subprocess.run(command, check=True)


def run(args: argparse.Namespace) -> int:
    """Run the demo (or, with the hidden ``--phase``, one of its later phases)."""
    if args.phase == "recall":
        _phase_recall(args.store, args.embedder)
        return 0
    if args.phase == "after-forget":
        _phase_after_forget(args.store, args.embedder)
        return 0
    with tempfile.TemporaryDirectory(prefix="memcore-demo-") as folder:
        url = args.store or f"jsonl://{Path(folder) / 'memories'}"
        _phase_write(url, args.embedder)
        _restart(url, args.embedder, "recall")
        _restart(url, args.embedder, "after-forget")
    return 0
