"""``memcore mcp``: the MCP memory server, driven by the MCP SDK's own client over real transports.

Every server here is a real ``python -m memcore mcp`` subprocess: over stdio (``stdio_client``)
and over streamable HTTP with bearer tokens (``streamable_http_client``). Scope comes from the
command line or the token; a tool call naming a scope is refused.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from memcore.cli import main
from memcore.scope import Scope

SERVER = [sys.executable, "-m", "memcore", "mcp", "--embedder", "hash"]
ENV = {"MEMCORE_LOAD_PLUGINS": os.environ.get("MEMCORE_LOAD_PLUGINS", "")}
TOOLS = {"remember", "recall", "list", "update", "forget"}
SCOPE_WORDS = {"tenant", "user", "user_id", "agent", "agent_id", "session", "session_id", "scope"}


@asynccontextmanager
async def stdio_session(tmp_path: Path, *options: str) -> AsyncIterator[ClientSession]:
    """A client session with a fresh ``memcore mcp`` subprocess over stdio; its stderr goes to a file."""
    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], *options], env=ENV)
    with (tmp_path / "server.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; the call must succeed."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    return structured


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that must fail."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return _text(result)


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def contents(found: dict[str, Any]) -> list[str]:
    return [memory["content"] for memory in found["memories"]]


async def recent(session: ClientSession) -> list[str]:
    read = await session.read_resource("memcore://recent")
    return contents(json.loads(read.contents[0].text))  # type: ignore[union-attr]


async def test_tools_and_resources_over_stdio(tmp_path: Path) -> None:
    store = f"jsonl://{tmp_path / 'store'}"
    async with stdio_session(tmp_path, "--store", store, "--tenant", "acme", "--user", "alice") as session:
        listed = (await session.list_tools()).tools
        assert {tool.name for tool in listed} == TOOLS
        for tool in listed:  # no scope field to set, and nothing undeclared accepted
            assert not SCOPE_WORDS & set(tool.input_schema["properties"]), tool.name
            assert tool.input_schema["additionalProperties"] is False
            assert tool.output_schema is not None
        assert [str(r.uri) for r in (await session.list_resources()).resources] == ["memcore://recent"]
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["memcore://memories/{id}"]

        cat = await call(session, "remember", text="My cat is called Mochi.", metadata={"topic": "pets"})
        nuts = await call(session, "remember", text="I am allergic to peanuts.", metadata={"topic": "food"})
        await call(session, "remember", text="I like dark chocolate.", metadata={"topic": "food"})
        assert cat["kind"] == "note" and cat["metadata"] == {"topic": "pets"}

        hits = await call(
            session, "recall", query="what is my cat called", limit=1, filter={}
        )  # {}: no filter
        assert [hit["id"] for hit in hits["memories"]] == [cat["id"]]
        assert hits["memories"][0]["score"] is not None
        food = await call(session, "recall", query="cat peanuts chocolate", filter={"metadata.topic": "food"})
        assert sorted(contents(food)) == ["I am allergic to peanuts.", "I like dark chocolate."]
        oldest_first = await call(session, "list", order="asc")
        assert contents(oldest_first) == [
            "My cat is called Mochi.",
            "I am allergic to peanuts.",
            "I like dark chocolate.",
        ]
        assert await recent(session) == contents(oldest_first)[::-1]
        one = await session.read_resource(f"memcore://memories/{cat['id']}")
        assert contents(json.loads(one.contents[0].text)) == ["My cat is called Mochi."]  # type: ignore[union-attr]

        # A model-supplied scope is refused, and the refused call writes nothing.
        assert "user_id" in await refused(session, "remember", text="Bob's secret", user_id="bob")
        assert "tenant" in await refused(session, "recall", query="cat", tenant="other")
        assert "scope" in await refused(session, "list", scope={"user_id": "bob"})
        assert "FilterError" in await refused(session, "list", filter={"user_id": "bob"})
        assert "Bob's secret" not in contents(await call(session, "list"))
        # Bad input: typed errors the client can read, and the server keeps serving.
        assert "InvalidIdError" in await refused(session, "forget", id="not-a-uuid")
        assert "FilterError" in await refused(
            session, "recall", query="cat", filter={"metadata.topic": {"$regex": "."}}
        )
        assert "limit" in await refused(session, "recall", query="cat", limit=1000)
        assert "InvalidInputError" in await refused(session, "recall", query="   ")
        assert "InvalidInputError" in await refused(session, "remember", text="  ")
        assert "limit" in await refused(session, "recall", query="cat", limit="3")  # no coercion
        assert "limit" in await refused(session, "recall", query="cat", limit=True)

        moved = await call(session, "update", id=cat["id"], text="My cat Mochi now lives with my sister.")
        assert moved["updated_at"] is not None
        hits = await call(session, "recall", query="where does my cat live", limit=1)
        assert contents(hits) == ["My cat Mochi now lives with my sister."]

        assert await call(session, "forget", id=nuts["id"]) == {"id": nuts["id"], "deleted": 1}
        hits = await call(session, "recall", query="allergic to peanuts")
        assert nuts["id"] not in [hit["id"] for hit in hits["memories"]]
        assert "I am allergic to peanuts." not in contents(await call(session, "list"))
        assert "I am allergic to peanuts." not in await recent(session)
        with pytest.raises(MCPError, match="no memory"):
            await session.read_resource(f"memcore://memories/{nuts['id']}")
        assert "RecordNotFoundError" in await refused(session, "forget", id=nuts["id"])


async def test_restart_users_and_erasure_on_a_durable_store(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    alice = ["--store", f"jsonl://{folder}", "--tenant", "acme", "--user", "alice", "--purge-on-exit"]
    async with stdio_session(tmp_path, *alice) as session:
        kept = await call(session, "remember", text="Alice keeps her passport in the blue drawer.")
        gone = await call(session, "remember", text="Alice's door code is 4711.")
        await call(session, "forget", id=gone["id"])
        # One process at a time on a jsonl folder: a second server is refused, not let in.
        second = subprocess.run(
            [*SERVER, *alice],
            env={**os.environ, **ENV},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        assert second.returncode == 1 and second.stdout == ""
        assert "is open in another process" in second.stderr, second.stderr
    # --purge-on-exit: the forgotten note's bytes are gone from the files, not only from reads.
    on_disk = b"".join(path.read_bytes() for path in folder.rglob("*") if path.is_file())
    assert b"4711" not in on_disk and b"blue drawer" in on_disk

    bob = ["--store", f"jsonl://{folder}", "--tenant", "acme", "--user", "bob"]
    async with stdio_session(tmp_path, *bob) as session:
        assert contents(await call(session, "list")) == []
        assert contents(await call(session, "recall", query="passport drawer")) == []
        assert await recent(session) == []
        with pytest.raises(MCPError):
            await session.read_resource(f"memcore://memories/{kept['id']}")
        assert "RecordNotFoundError" in await refused(session, "forget", id=kept["id"])
        await call(session, "remember", text="Bob parks on level 3.")

    async with stdio_session(tmp_path, *alice) as session:  # after a restart: kept, still forgotten, no Bob
        assert contents(await call(session, "list")) == ["Alice keeps her passport in the blue drawer."]
        assert contents(await call(session, "recall", query="door code parking")) == [
            "Alice keeps her passport in the blue drawer."
        ]


async def test_list_and_recent_show_what_recall_can_find_not_prompts_or_tool_results() -> None:
    from mcp import Client

    from memcore import MemoryRecord, Message, open_embedder, open_store
    from memcore.integrations.mcp import build_server

    scope = Scope(tenant="acme", user_id="alice")
    store = open_store("memory://")
    messages = [
        Message(role="system", content="You are a travel agent."),
        Message(role="user", content="I prefer aisle seats."),
    ]
    store.add([MemoryRecord(scope=scope, message=message) for message in messages])
    server = build_server(store, open_embedder("hash"), scope)
    async with Client(server.mcp) as client:
        listed = await client.call_tool("list", {})
        assert contents(listed.structured_content or {}) == ["I prefer aisle seats."]
        read = await client.read_resource("memcore://recent")
        assert contents(json.loads(read.contents[0].text)) == ["I prefer aisle seats."]  # type: ignore[union-attr]


async def test_purge_on_exit_erases_replaced_content_with_nothing_forgotten(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    options = ["--store", f"jsonl://{folder}", "--tenant", "acme", "--user", "alice", "--purge-on-exit"]
    async with stdio_session(tmp_path, *options) as session:
        note = await call(session, "remember", text="My SSN is 123-45-6789.", metadata={"card": "4111-1111"})
        await call(session, "update", id=note["id"], text="My SSN is on file.", metadata={"card": None})
    on_disk = b"".join(path.read_bytes() for path in folder.rglob("*") if path.is_file())
    assert b"123-45-6789" not in on_disk and b"4111-1111" not in on_disk
    assert b"My SSN is on file." in on_disk


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_closes_the_store_and_ends_a_stdio_server_whose_stdin_stays_open(
    tmp_path: Path, signum: int
) -> None:
    folder = tmp_path / "store"
    server = subprocess.Popen(
        [*SERVER, "--store", f"jsonl://{folder}", "--tenant", "acme"],
        env={**os.environ, **ENV},
        stdin=subprocess.PIPE,  # held open: the SDK's stdin reader never sees its end
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not (folder / "meta.json").exists():  # the store is open
            assert server.poll() is None and time.monotonic() < deadline, server.stderr
            time.sleep(0.05)
        time.sleep(0.5)  # the event loop is serving
        server.send_signal(signum)
        assert server.wait(timeout=20) == 0
    finally:
        server.kill()
        server.communicate()
    from memcore import open_store

    with open_store(f"jsonl://{folder}") as store:  # closed and unlocked: another process opens it
        assert store.count(Scope(tenant="acme")) == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def http_server(tmp_path: Path, tokens: dict[str, dict[str, str]]) -> Iterator[str]:
    """A ``memcore mcp --transport streamable-http --tokens`` subprocess; yields its URL."""
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    port = _free_port()
    options = [
        "--store",
        f"jsonl://{tmp_path / 'store'}",
        "--transport",
        "streamable-http",
        "--port",
        str(port),
    ]
    with (tmp_path / "server.log").open("a") as errlog:
        server = subprocess.Popen(
            [*SERVER, *options, "--tokens", str(tmp_path / "tokens.json")],
            env={**os.environ, **ENV},
            stdin=subprocess.DEVNULL,
            stdout=errlog,
            stderr=errlog,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.terminate()
            assert server.wait(timeout=30) == 0, (tmp_path / "server.log").read_text()  # closed cleanly


@asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def test_streamable_http_takes_the_scope_from_the_bearer_token(tmp_path: Path) -> None:
    alice, bob = "alice-" + "a" * 24, "bob-" + "b" * 24
    tokens = {alice: {"tenant": "acme", "user_id": "alice"}, bob: {"tenant": "acme", "user_id": "bob"}}
    with http_server(tmp_path, tokens) as url:
        async with http_session(url, alice) as session:
            secret = await call(session, "remember", text="Alice's locker is number 12.")
        async with http_session(url, bob) as session:
            await call(session, "remember", text="Bob's locker is number 40.")
            assert contents(await call(session, "recall", query="locker number")) == [
                "Bob's locker is number 40."
            ]
            assert await recent(session) == ["Bob's locker is number 40."]
            assert "RecordNotFoundError" in await refused(session, "forget", id=secret["id"])
            assert "user_id" in await refused(session, "list", user_id="alice")
        async with http_session(url, alice) as session:
            assert contents(await call(session, "list")) == ["Alice's locker is number 12."]
        async with httpx2.AsyncClient() as http:
            for headers in ({"Authorization": "Bearer " + "x" * 30}, {}):
                answer = await http.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
                )
                assert answer.status_code == 401


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mcp", "--store", "memory://", "--user", "alice"], "needs --tenant"),
        (["mcp", "--store", "memory://", "--tokens", "t.json"], "needs --transport streamable-http"),
        (
            ["mcp", "--tenant", "acme", "--transport", "streamable-http", "--tokens", "t.json"],
            "leave out --tenant",
        ),
        (["mcp", "--tenant", "acme", "--transport", "streamable-http", "--host", "0.0.0.0"], "--tokens"),
        (["mcp", "--tenant", "acme", "--user", "a/b"], "ScopeError|not allowed|scope"),
    ],
)
def test_cli_refuses_configurations_that_would_blur_the_scope(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--embedder", "hash"]) == 1
    assert re.search(message, capsys.readouterr().err)


def test_token_files_are_checked(tmp_path: Path) -> None:
    from memcore.errors import InvalidInputError, ScopeError
    from memcore.integrations.mcp import TokenScopes

    path = tmp_path / "tokens.json"
    for content, error in [
        ({"short": {"tenant": "acme"}}, InvalidInputError),
        ({"x" * 20: {"user_id": "alice"}}, ScopeError),  # the tenant is never implied
        ({"x" * 20: {"tenant": "acme", "user_id": "../bob"}}, ScopeError),
        ({"x" * 20: {"tenant": "acme", "user": "alice"}}, ScopeError),  # a typo never widens the scope
        (["x" * 20], InvalidInputError),
    ]:
        path.write_text(json.dumps(content))
        with pytest.raises(error):
            TokenScopes.from_file(path)
