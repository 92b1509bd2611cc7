"""``memcore demo``, the README's main job, end to end with the real MiniLM embedder."""

from __future__ import annotations

import subprocess
import sys


def test_demo_shows_recall_isolation_forget_and_budget() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memcore", "demo"], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    phase2 = out.split("Phase 2", 1)[1].split("The coach", 1)[0]
    context = phase2.split("context for its next model call:", 1)[1]
    assert "vegetarian" in context and "daughter Lea" in context, (
        "recall after a restart brings back session 1"
    )
    assert "any travel memory among them: False" in out
    assert "the coach tries first: 0 deleted" in out and "the travel agent: 2 deleted" in out
    for path in ("get by id", "list", "text search", "recall", "get_context"):
        assert f"{path.ljust(12)} -> []" in out, path
    assert "records mentioning peanuts: []" in out
    lifecycle = out.split("Notes consolidate; memories expire", 1)[1]
    assert "remembered twice: same note True, notes stored: 1" in lifecycle
    assert "recall for 'which gate': ['Boarding at gate B12" in lifecycle
    assert "three hours later" in lifecycle
    expired = lifecycle.split("three hours later", 1)[1]
    assert "recall for 'which gate': []" in expired and "get by id: []" in expired
    assert "swept: 1 expired record deleted" in expired
    for line in out.splitlines():
        if line.strip().startswith("budget"):
            budget, tokens = line.split(":")[0].split()[1], line.split(":")[1].split()[0]
            assert int(tokens) <= int(budget) and line.endswith("system first: True"), line
