"""``memcore bench`` on a tiny size, so the harness cannot rot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from memcore import hookimpl, open_store
from memcore.bench.dataset import random_dataset, selective_scope
from memcore.bench.timing import sample
from memcore.bench.workloads import id_list, insert, opened, search_workloads
from memcore.cli import main
from memcore.plugin_manager import get_plugin_manager
from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.testing.raw_baseline import check_raw_baseline


def test_quick_bench_writes_json_markdown_and_plots(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "bench"
    stores = ["--stores", "memory://,jsonl://{tmp}"]
    status = main(["bench", "--quick", *stores, "--dim", "32", "--embedder", "hash", "--out", str(out)])
    assert status == 0
    results = json.loads((out / "results.json").read_text())
    assert {run["store"] for run in results["runs"]} == {"memory://", "jsonl://{tmp}"}
    for run in results["runs"]:
        assert run["search"]["recall_at_10"] == 1.0, "exact stores must match the exact floor"
        assert run["insert_records_per_s"] > 0
        for case in ("all", "scope-1%", "scope-10%", "scope-50%", "filter-1%", "filter-10%", "filter-50%"):
            assert run["search"][case]["p50_ms"] > 0 and run["floor"][case]["p50_ms"] > 0
    assert len(results["many_tenants"]) == 2
    for loop in results["agent_loop"]:
        assert loop["turns"] == 400 and loop["turns_per_s"] > 0 and loop["get_context"]["p50_ms"] > 0
        assert loop["recall"] == "hybrid"  # the built-in stores' default
    assert results["machine"]["command"].startswith("memcore")
    table = (out / "results.md").read_text()
    assert "numpy floor" in table and "| memory:// | 5000 |" in table
    for plot in ("latency.png", "selectivity.png", "recall.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_agent_loop_recalls_as_asked(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    arguments = ["bench", "--quick", "--stores", "memory://", "--dim", "32", "--embedder", "hash"]
    assert main([*arguments, "--recall", "dense", "--out", str(out)]) == 0
    [loop] = json.loads((out / "results.json").read_text())["agent_loop"]
    assert loop["recall"] == "dense"
    assert "| memory:// | dense | 400 |" in (out / "results.md").read_text()


def test_the_concurrency_workload_runs_async_beside_threads(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    arguments = ["bench", "--concurrency", "1,4", "--quick", "--stores", "memory://", "--embedder", "hash"]
    assert main([*arguments, "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["concurrency"]
    assert [(row["workload"], row["agents"], row["api"]) for row in rows] == [
        (workload, agents, api)
        for workload in ("memory", "store")
        for agents in (1, 4)
        for api in ("async", "threads")
    ]
    for row in rows:
        assert row["contexts"] == 3 * row["agents"] and row["contexts_per_s"] > 0
        assert row["get_context_p50_ms"] > 0 and row["loop_lag_p99_ms"] >= 0
    # The async API runs on the store's one worker; the thread pool has a thread per agent.
    assert rows[2]["peak_threads"] < rows[3]["peak_threads"]
    table = (out / "results.md").read_text()
    assert "| memory:// | memory | 4 | async |" in table and "| memory:// | store | 4 | threads |" in table


def test_the_expiry_workload_compares_the_same_searches_without_and_with_ttls(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    arguments = ["bench", "--expiry", "--quick", "--stores", "memory://,jsonl://{tmp}"]
    assert main([*arguments, "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["expiry"]
    assert [(row["store"], row["size"]) for row in rows] == [
        (store, size) for size in (1_000, 5_000) for store in ("memory://", "jsonl://{tmp}")
    ]
    for row in rows:
        for variant in ("ttl", "expired"):
            assert set(row["ratio_p50"][variant]) == {"all", "scope-1%", "scope-10%", "scope-50%"}
            assert all(ratio > 0 for ratio in row["ratio_p50"][variant].values())
    assert "| memory:// | 5,000 | scope-10% |" in (out / "results.md").read_text()


@pytest.mark.parametrize("counts", ["0", "a,b", ""])
def test_the_concurrency_workload_refuses_bad_agent_counts(
    tmp_path: Path, counts: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--concurrency", counts, "--stores", "memory://", "--out", str(tmp_path)]) == 1
    assert "--concurrency takes agent counts" in capsys.readouterr().err


def test_locomo_recall_on_a_small_conversation(tmp_path: Path) -> None:
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat called Mochi last week."},
        {
            "speaker": "Bob",
            "dia_id": "D1:2",
            "text": "Lovely, what colour is she?",
            "blip_caption": "a grey kitten",
        },
        {"speaker": "Ann", "dia_id": "D2:1", "text": "I started learning the violin in March."},
        {"speaker": "Bob", "dia_id": "D2:2", "text": "My brother plays the cello in an orchestra."},
    ]
    data = [
        {
            "sample_id": "conv-x",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1": turns[:2],
                "session_2": turns[2:],
            },
            "qa": [
                {"question": "What is the name of Ann's cat Mochi?", "evidence": ["D1:1"], "category": 4},
                {
                    "question": "Which instrument is Ann learning, the violin?",
                    "evidence": ["D:2:01"],
                    "category": 2,
                },
                {"question": "Who plays in an orchestra?", "evidence": ["D2:2; D9:9"], "category": 1},
                {"question": "No evidence here", "evidence": [], "category": 3},
            ],
        }
    ]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["bench", "--data", str(path), "--embedder", "hash", "--out", str(out)]) == 0
    locomo = json.loads((out / "results.json").read_text())["locomo"]
    assert locomo["questions"] == 3
    assert locomo["evidence_repaired"] == 1 and locomo["evidence_dropped"] == 1
    modes = locomo["modes"]
    assert modes["dense"]["recall"]["overall"]["recall@10"] == 1.0, "every turn is in the top 10 of 4"
    assert modes["keyword"]["recall"]["overall"]["recall@1"] == 1.0, "each question names its turn's word"
    assert modes["hybrid"]["recall"]["overall"]["recall@1"] == 1.0
    assert all(modes[mode]["recall_p50_ms"] > 0 for mode in ("dense", "keyword", "hybrid"))
    assert "| overall |" in (out / "results.md").read_text()


class _DictRawClient:
    """A raw baseline for ``memory://`` in tests: JSON documents and vectors in a dict."""

    def __init__(self) -> None:
        self.documents: dict[UUID, tuple[Scope, str, Any]] = {}

    def prepare(self, records: list[MemoryRecord], vectors: Any) -> list[tuple[UUID, Scope, str, Any]]:
        return [(r.id, r.scope, r.model_dump_json(), v) for r, v in zip(records, vectors, strict=True)]

    def add(self, prepared: list[tuple[UUID, Scope, str, Any]]) -> None:
        for record_id, scope, document, vector in prepared:
            self.documents[record_id] = (scope, document, vector)

    def search(self, scope: Scope, vector: Any, limit: int) -> list[Any]:
        hits = [(float(v @ vector), d) for s, d, v in self.documents.values() if scope.matches(s)]
        return [json.loads(d) for _, d in sorted(hits, reverse=True)[:limit]]

    def get(self, scope: Scope, ids: list[UUID]) -> list[Any]:
        found = [self.documents[i] for i in ids if i in self.documents]
        return [json.loads(d) for s, d, _ in found if scope.matches(s)]

    def delete(self, scope: Scope, ids: list[UUID]) -> None:
        for record_id in ids:
            if record_id in self.documents and scope.matches(self.documents[record_id][0]):
                del self.documents[record_id]

    def close(self) -> None:
        self.documents.clear()


class _DictBaseline:
    @hookimpl
    def memcore_bench_raw_client(self, url: str) -> _DictRawClient | None:
        return _DictRawClient() if url == "memory://" else None


@pytest.fixture
def dict_baseline() -> Iterator[None]:
    manager = get_plugin_manager()
    manager.register(_DictBaseline(), name="dict-baseline")
    try:
        yield
    finally:
        manager.unregister(name="dict-baseline")


def test_the_dict_baseline_does_what_memory_does(dict_baseline: None) -> None:
    check_raw_baseline("memory://")


def test_bench_reports_adapter_overhead_where_a_raw_client_exists(
    dict_baseline: None, tmp_path: Path
) -> None:
    out = tmp_path / "bench"
    arguments = ["bench", "--quick", "--stores", "memory://,jsonl://{tmp}", "--dim", "16", "--out", str(out)]
    assert main([*arguments, "--agent-loop", "0"]) == 0
    overhead = json.loads((out / "results.json").read_text())["adapter_overhead"]
    assert [row["store"] for row in overhead] == ["memory://"], "jsonl has no raw client"
    assert all(overhead[0][op]["ratio"] > 0 for op in ("add", "search", "get", "delete"))
    assert "| memory:// | " in (out / "results.md").read_text().split("Adapter overhead")[1]


def test_a_fresh_name_no_plugin_can_drop_is_reported(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="remove it yourself"), opened(f"jsonl://{tmp_path}/{{name}}"):
        pass
    assert [p.name[:14] for p in tmp_path.iterdir()] == ["memcore_bench_"]  # what was left, as warned


def test_a_fresh_folder_needs_no_drop(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    with opened("jsonl://{tmp}/{name}"):
        pass
    assert not [w for w in recwarn if "remove it yourself" in str(w.message)]


def test_each_scoped_search_reads_a_scope_whose_rows_the_floor_also_reads() -> None:
    """The floor gathers the rows of a few scope variants: a store searching other scopes would
    spread its reads over more memory than the floor and compare worse for no fault of its own."""
    dataset = random_dataset(400, 8, 12)
    store = open_store("memory://")
    ids = id_list(insert(store, dataset, lambda *_: None)[0])
    searched: list[Scope] = []
    search = store.search

    def recording(scope: Scope, **kwargs: Any) -> Any:
        searched.append(scope)
        return search(scope, **kwargs)

    store.search = recording  # type: ignore[method-assign]
    search_workloads(store, dataset, ids, 12, lambda *_: None)
    floor_variants = {selective_scope(percent, v) for percent in (1, 10, 50) for v in range(4)}
    scoped = {scope for scope in searched if scope.user_id or scope.agent_id or scope.session_id}
    assert scoped == floor_variants


def test_sample_runs_before_ahead_of_every_call_untimed() -> None:
    order: list[str] = []
    samples = sample(
        lambda i: order.append(f"call {i}"), 2, warmup=1, before=lambda i: order.append(f"before {i}")
    )
    assert order == ["before 0", "call 0", "before 0", "call 0", "before 1", "call 1"]
    assert len(samples) == 2
