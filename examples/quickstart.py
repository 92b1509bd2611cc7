"""memcore in one screen: write, search, forget and reopen, on the embedded default store.

Run it with ``make demo`` (which sets up .venv first) or ``python examples/quickstart.py``.
Uses the dependency-free ``hash`` embedder; ``memcore demo`` (coming with the
agent-memory layer) does the same with real MiniLM embeddings.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import memcore
from memcore import MemoryRecord, Message, Scope

FACTS = {
    "alice": ["My cat is called Mochi.", "I am allergic to peanuts.", "I live in Oslo."],
    "bob": ["My dog is called Rex.", "I work night shifts at the hospital.", "I live in Lisbon."],
}


def main() -> None:
    embedder = memcore.open_embedder("hash")
    with tempfile.TemporaryDirectory() as folder:
        url = f"jsonl://{Path(folder) / 'memories'}"
        print(f"store: {url}  embedder: {embedder.name} ({embedder.dim} dimensions)\n")

        store = memcore.open_store(url)
        scopes = {user: Scope(tenant="demo", user_id=user) for user in FACTS}
        for user, facts in FACTS.items():
            records = [
                MemoryRecord(scope=scopes[user], message=Message(role="user", content=f)) for f in facts
            ]
            store.add(records, embedder.embed(facts))
            print(f"wrote {len(records)} memories for {user}")

        question = "what is my pet called?"
        query = embedder.embed([question])[0]
        for user in FACTS:
            [best] = store.search(scopes[user], vector=query, limit=1)
            print(f"{user!r} asks {question!r} -> {best.record.message.content!r} (score {best.score:.2f})")

        peanut = store.search(scopes["alice"], text="peanut")[0].record
        print(f"\nforgetting {peanut.id} ({peanut.message.content!r})")
        print("deleted:", store.delete(scopes["alice"], [peanut.id]))
        print("bob cannot delete alice's memory:", store.delete(scopes["bob"], [peanut.id]) == 0)
        store.close()

        with memcore.open_store(url) as reopened:
            print("\nafter reopening:")
            print(
                "  alice has",
                reopened.count(scopes["alice"]),
                "memories, bob has",
                reopened.count(scopes["bob"]),
            )
            print("  get  :", reopened.get(scopes["alice"], [peanut.id]))
            print("  text :", reopened.search(scopes["alice"], text="peanut"))
            hits = reopened.search(scopes["alice"], vector=embedder.embed(["allergies"])[0], limit=5)
            print("  vector:", [hit.record.message.content for hit in hits])
            reopened.purge()
            print("  purged: the deleted memory is gone from the files too")


if __name__ == "__main__":
    main()
