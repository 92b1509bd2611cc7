"""``memcore bench`` on a tiny size, so the harness cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

from memcore.cli import main


def test_quick_bench_writes_json_markdown_and_plots(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "bench"
    status = main(
        ["bench", "--quick", "--stores", "memory://,jsonl://{tmp}", "--dim", "32", "--out", str(out)]
    )
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
    assert results["machine"]["command"].startswith("memcore")
    table = (out / "results.md").read_text()
    assert "numpy floor" in table and "| memory:// | 5000 |" in table
    for plot in ("latency.png", "selectivity.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
