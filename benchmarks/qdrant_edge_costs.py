"""Where a Qdrant Edge write and search spend their time, memcore's side against the engine's.

    .venv/bin/python benchmarks/qdrant_edge_costs.py

Issue 25's targets for Qdrant Edge (adapter overhead at most 1.10x, write ratio at least 0.95)
are missed; this says where the time goes. p50 in microseconds over ``--repeats`` calls:

- ``point_conversion``: qdrant-edge-py turning one Python payload into Rust (``edge.Point``): a
  list of 15 strings, of 15 ints, of 15 floats, one string as long as the 15 joined, the payload
  memcore writes for one bench record, and none. A string in a list costs several times an int:
  qdrant-edge-py tries each value as bool, unsigned, signed and float, each failure raising a
  Python error, before taking it as a string.
- ``write``: an agent's turn (two records with vectors) through ``store.add``; the same with the
  engine adapter's upsert answering at once (memcore's side before the adapter: the records' and
  vectors' checks, the payloads, the storage ids, the lock and the plan), and that again with
  each call after an untimed raw write of a turn; two of its parts alone (``check_records``,
  which every store runs: each record serialised and validated again; and ``to_payload``); and
  the raw client's two steps, qdrant-edge-py's points and the shard's update.
- ``search``: a scoped search of ``limit=10`` over one agent's records through ``store.search``;
  the raw client's same query, parsing its JSON (``memcore bench``'s baseline); ``store.search``
  with the engine adapter's query answering ten hits it found before (memcore's side around the
  adapter: the checks, the scope's clause, the plan, the typed records; the adapter's rendering
  of the request and its hits go with the engine's query), and that again with each call after an
  untimed raw query (the state a real search leaves the CPU's caches in); and memcore's decode of
  ten payloads into typed records against ``json.loads`` of the same JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as edge
from memcore_qdrant import payload as fields
from memcore_qdrant.engine import VECTOR_NAME
from memcore_qdrant.filters import scoped
from memcore_qdrant.keywords import KEYWORD_VECTOR
from memcore_qdrant.raw_baseline import RawQdrantEdge

from memcore import MemoryRecord, Message, Scope, open_store
from memcore.bench.dataset import record
from memcore.bench.timing import sample
from memcore.validation import check_records, normalize_rows

DIM = 384


def _p50_us(call: Callable[[int], Any], repeats: int, before: Callable[[int], Any] | None = None) -> float:
    return round(statistics.median(sample(call, repeats, before=before)) * 1e3, 1)


def _unit(rng: np.random.Generator, rows: int) -> Any:
    return normalize_rows(rng.standard_normal((rows, DIM)).astype(np.float32))


def point_conversion(repeats: int) -> dict[str, float]:
    """One ``edge.Point`` per call, its payload and vector made beforehand."""
    words = [f"word{i:02d}" for i in range(15)]
    vector = {VECTOR_NAME: [0.1] * DIM}
    payloads = {
        "15_strings": {"k": words},
        "15_ints": {"k": list(range(15))},
        "15_floats": {"k": [i + 0.5 for i in range(15)]},
        "one_string_as_long": {"k": "".join(words)},
        "memcore_record": fields.to_payload(record(0)),
        "empty": {},
    }
    return {
        name: _p50_us(lambda i, payload=payload: edge.Point(i, vector, payload), repeats)
        for name, payload in payloads.items()
    }


def _turn(i: int, scope: Scope) -> list[MemoryRecord]:
    return [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"question {i} about the plan")),
        MemoryRecord(scope=scope, message=Message(role="assistant", content=f"answer {i}: the plan holds")),
    ]


def _edge_points(prepared: list[tuple[Any, ...]]) -> list[edge.Point]:
    """The points of a prepared batch, as the raw baseline builds them."""
    return [
        edge.Point(pid, {VECTOR_NAME: vector.tolist(), KEYWORD_VECTOR: edge.SparseVector(*words)}, payload)
        for pid, vector, payload, words in prepared
    ]


def write(folder: Path, repeats: int) -> dict[str, float]:
    """An agent's turn of two records, through the store and by hand on a raw shard."""
    rng = np.random.default_rng(0)
    scope = Scope(tenant="t", user_id="u", agent_id="a")
    store = open_store(f"qdrant://{folder / 'store'}")
    raw = RawQdrantEdge(folder / "raw")
    turns = [_turn(i, scope) for i in range(repeats)]
    vectors = [_unit(rng, 2) for _ in range(repeats)]
    # The raw shard is made on the first prepare.
    prepared = [raw.prepare(turn, vector) for turn, vector in zip(turns, vectors, strict=True)]
    points = [_edge_points(turn) for turn in prepared]
    shard = raw._open  # the benchmark times the raw shard's update on purpose
    timings = {
        "store_add": _p50_us(lambda i: store.add(turns[i], vectors[i]), repeats),
        "check_records": _p50_us(lambda i: check_records(turns[i]), repeats),
        "to_payload": _p50_us(lambda i: [fields.to_payload(r) for r in turns[i]], repeats),
        "edge_points": _p50_us(lambda i: _edge_points(prepared[i]), repeats),
        "shard_update": _p50_us(
            lambda i: shard.update(edge.UpdateOperation.upsert_points(points[i])), repeats
        ),
    }

    def upsert(points: Any) -> None:  # named: the store calls the engine by name
        return None

    store._engine.upsert = upsert  # memcore's side alone
    timings["store_add_engine_answering_at_once"] = _p50_us(
        lambda i: store.add(turns[i], vectors[i]), repeats
    )
    timings["the_same_after_a_raw_write"] = _p50_us(
        lambda i: store.add(turns[i], vectors[i]),
        repeats,
        before=lambda i: shard.update(edge.UpdateOperation.upsert_points(_edge_points(prepared[i]))),
    )
    store.close()
    raw.close()
    return timings


def search(folder: Path, records: int, repeats: int) -> dict[str, float]:
    """A scoped search of ten hits over one agent's ``records``, memcore's and the raw client's."""
    rng = np.random.default_rng(1)
    scope = Scope(tenant="t", user_id="u", agent_id="a")
    batch = [
        MemoryRecord(scope=scope, message=Message(role="user", content=f"note {i} on the plan"))
        for i in range(records)
    ]
    vectors = _unit(rng, records)
    store = open_store(f"qdrant://{folder / 'search'}")
    store.add(batch, vectors)
    raw = RawQdrantEdge(folder / "search-raw")
    raw.add(raw.prepare(batch, vectors))
    queries = _unit(rng, 64)
    hits = store.search(scope, vector=queries[0], limit=10)
    payloads = [fields.to_payload(hit.record) for hit in hits]
    texts = [payload[fields.RECORD] for payload in payloads]
    timings = {
        "store_search": _p50_us(lambda i: store.search(scope, vector=queries[i % 64], limit=10), repeats),
        "raw_search": _p50_us(lambda i: raw.search(scope, queries[i % 64], 10), repeats),
        "decode_10_records": _p50_us(lambda i: fields.records_from(payloads), repeats),
        "json_loads_10_records": _p50_us(lambda i: [json.loads(text) for text in texts], repeats),
    }
    engine = store._engine  # the engine answers at once: what is left is memcore's own work
    found = engine.query(queries[0].tolist(), scoped(scope), 10)

    def query(vector: Any, where: Any, limit: int) -> Any:  # named: the store calls the engine by name
        return found

    engine.query = query
    timings["store_search_engine_answering_at_once"] = _p50_us(
        lambda i: store.search(scope, vector=queries[i % 64], limit=10), repeats
    )
    timings["the_same_after_a_raw_query"] = _p50_us(
        lambda i: store.search(scope, vector=queries[i % 64], limit=10),
        repeats,
        before=lambda i: raw.search(scope, queries[(i + 1) % 64], 10),
    )
    store.close()
    raw.close()
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--records", type=int, default=5000, help="the searched agent's records")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        result = {
            "us_p50": {
                "point_conversion": point_conversion(args.repeats),
                "write": write(Path(folder), min(args.repeats, 1000)),
                "search": search(Path(folder), args.records, args.repeats),
            }
        }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
