"""The README and the commands it promises stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _python_block(after_heading: str) -> str:
    section = README.split(after_heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block after {after_heading!r}"
    return match.group(1)


def test_first_screen_gives_the_two_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:20])
    assert "make demo" in first_screen and "make test" in first_screen


def test_ci_runs_the_readme_test_command() -> None:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.startswith("#")]
    assert "make test" in lines


def test_make_test_runs_lint_types_and_every_suite() -> None:
    # `make -n` prints what `make test` would run, through its sub-make of two lanes.
    planned = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = planned.stdout.splitlines()
    assert ".venv/bin/ruff check ." in lines and ".venv/bin/ruff format --check ." in lines
    assert any(line.startswith(".venv/bin/mypy memcore plugins/") for line in lines)
    assert ".venv/bin/python -m pytest" in lines  # the core suite
    for plugin in sorted(path for path in (ROOT / "plugins").iterdir() if path.is_dir()):
        assert f"-m pytest plugins/{plugin.name}/tests" in planned.stdout, plugin.name
    assert "-m pytest -W ignore::pytest.PytestConfigWarning tests-camel" in planned.stdout


def test_quickstart_code_runs(tmp_path: Path) -> None:
    code = _python_block("## Quickstart").replace("/tmp/memories", str(tmp_path / "memories"))
    exec(compile(code, "README quickstart", "exec"), {})
    assert (tmp_path / "memories" / "meta.json").exists()


def test_memories_code_runs(tmp_path: Path) -> None:
    code = _python_block("## Memories").replace("/tmp/agent-memory", str(tmp_path / "agent-memory"))
    namespace: dict[str, Any] = {}
    exec(compile(code, "README memories", "exec"), namespace)
    assert namespace["tokens"] <= 2_000
    assert namespace["memory"].store.count(namespace["session"]) == 1


def test_lifecycle_code_runs() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_python_block("## Lifecycle"), "README lifecycle", "exec"), namespace)
    assert [(entry.scope.user_id, entry.count) for entry in namespace["per_user"]] == [("alice", 3)]
    assert namespace["expired"] == 0
    store = namespace["store"]
    assert store.get(namespace["session"], [namespace["note"].id]) == []
    assert store.get(namespace["session"], [namespace["turn"].id])[0].message.content == "My gate is C4"


def test_async_code_runs() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_python_block("## Async"), "README async", "exec"), namespace)
    assert len(namespace["token_counts"]) == 8 and all(tokens > 0 for tokens in namespace["token_counts"])


def test_langchain_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_python_block("## Integrations"), "README integrations", "exec"), {})
    assert "Document(id='1'" in capsys.readouterr().out


def test_make_demo_runs_memcore_demo() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \$\(STAMP\)\n\t\$\(BIN\)/memcore demo$", makefile, re.M)


def test_the_quickstart_example_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "'alice' asks 'what is my pet called?' -> 'My cat is called Mochi.'" in result.stdout
    assert "'bob' asks 'what is my pet called?' -> 'My dog is called Rex.'" in result.stdout
    assert "alice has 2 memories, bob has 3" in result.stdout
    assert "get  : []" in result.stdout and "text : []" in result.stdout


def test_langgraph_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_python_block("**LangGraph**"), "README langgraph", "exec"), {})
    assert "I live in Lyon" in capsys.readouterr().out


def test_openai_agents_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_python_block("**OpenAI Agents SDK**"), "README openai agents", "exec"), {})
    out = capsys.readouterr().out
    assert "'call_id': 'c1'" in out and "\n[]\n" in out and "I am vegetarian" in out


def test_mcp_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(_python_block("**MCP memory server**"), "README mcp", "exec"), {})
    assert "['Alice is allergic to peanuts.']" in capsys.readouterr().out


def test_opentelemetry_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from memcore import telemetry

    try:
        exec(compile(_python_block("**OpenTelemetry**"), "README opentelemetry", "exec"), {})
    finally:
        telemetry.reset()
    assert "search_memory" in capsys.readouterr().out
