"""The built-in stores' keyword postings (packed ``row << 20 | count`` entries per term) rank exactly
as the exact scan does, through adds, replacements and deletes (which renumber a partition's last
row into the deleted one), with terms held by one row, by a few, and by more than are searched
without numpy."""

from __future__ import annotations

import random

import pytest

from memcore import open_store
from memcore.queries import KeywordQuery
from memcore.records import Message
from memcore.scope import Scope
from memcore.store import rank_by_keywords
from memcore.stores import keyword_postings
from memcore.stores.keyword_postings import Postings
from memcore.testing.helpers import make_record

VOCABULARY = ["tea", "weather", "walk", "turn", "topic", "garden", *map(str, range(10))]
MINE, OTHER = Scope(tenant="t", user_id="me"), Scope(tenant="t", user_id="other")


def _text(rng: random.Random) -> str:
    words = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 8))]
    if rng.random() < 0.3:
        words.append(f"unique{rng.randrange(10**9)}")  # a term one row holds
    return " ".join(words)


@pytest.mark.parametrize("scanned_in_python", [32, 2], ids=["python-search", "numpy-search"])
@pytest.mark.parametrize("url", ["memory://", "jsonl://{tmp}"])
def test_postings_rank_as_the_exact_scan_through_writes_and_deletes(
    url: str, scanned_in_python: int, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyword_postings, "_SCANNED_IN_PYTHON", scanned_in_python)
    rng = random.Random(5)
    with open_store(url.replace("{tmp}", str(tmp_path))) as store:
        live = []
        for step in range(400):
            action = rng.random()
            if action < 0.6 or len(live) < 5:
                record = make_record(rng.choice([MINE, MINE, OTHER]), _text(rng), minute=step)
                store.add([record])
                live.append(record)
            elif action < 0.75:
                at = rng.randrange(len(live))
                live[at] = live[at].model_copy(update={"message": Message(role="user", content=_text(rng))})
                store.add([live[at]])
            else:
                victim = live.pop(rng.randrange(len(live)))
                store.delete(victim.scope, [victim.id])
            if step % 20 == 19:
                for _ in range(3):
                    keywords = " ".join(rng.sample(VOCABULARY, rng.randint(1, 3)))
                    got = store.search(MINE, keywords=keywords, limit=1_000)
                    expected = rank_by_keywords(KeywordQuery(keywords, None, 1_000), store.list(MINE))
                    assert [h.record.id for h in got] == [h.record.id for h in expected], (step, keywords)
                    assert [h.score for h in got] == pytest.approx([h.score for h in expected])
        assert len([r for r in live if r.scope == MINE]) > 100, "few rows: the numpy search was not reached"


def test_a_term_keeps_its_count_and_goes_back_to_one_entry_when_one_row_is_left() -> None:
    postings = Postings()
    postings.add(0, "tea tea tea")
    postings.add(1, "tea")
    postings.add(2, "tea walk")
    postings.discard(1, "tea")
    postings.move(2, 1, "tea walk")
    rows, counts = postings.entries("tea") or ((), ())
    assert sorted(zip(rows.tolist(), counts.tolist(), strict=True)) == [(0, 3), (1, 1)]
    postings.discard(0, "tea tea tea")
    assert postings.rows["tea"] == 1 << 20 | 1 and postings.rows["walk"] == 1 << 20 | 1
    assert postings.entries("nothing") is None
