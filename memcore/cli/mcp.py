"""``memcore mcp``: serve a store as an MCP memory server, over stdio or streamable HTTP.

The scope every tool call works in comes from the options (``--tenant``, ``--user-id``, ...), or,
over HTTP with ``--tokens FILE``, from the bearer token of each request; never from the tools'
arguments. The MCP SDK (``memcore[mcp]``) is imported only when the command runs, so
``memcore --help`` works without it. Logs go to standard error: standard output is the stdio
transport's channel.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, get_args

from memcore.agent.policy import RecallReach
from memcore.errors import InvalidInputError
from memcore.plugins import open_embedder, open_store
from memcore.scope import Scope

if TYPE_CHECKING:
    from memcore.integrations.mcp import MemoryServer
    from memcore.store import Store

EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"
TRANSPORTS = ("stdio", "streamable-http")


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``mcp`` command to the ``memcore`` parser."""
    parser = subparsers.add_parser(
        "mcp",
        help="serve a store as an MCP memory server (stdio or streamable HTTP)",
        description="An MCP server with the tools remember, recall, list, update and forget and the "
        "resources memcore://recent and memcore://memories/{id}, all within one scope: the one "
        "the options give, or (streamable HTTP with --tokens) the one of each request's bearer token.",
    )
    parser.add_argument(
        "--store", help="store URL (default: $MEMCORE_STORE, else jsonl:// in the data folder)"
    )
    parser.add_argument("--tenant", help="the scope's tenant (required unless --tokens)")
    parser.add_argument("--user-id", "--user", dest="user_id", help="the scope's user")
    parser.add_argument("--agent-id", "--agent", dest="agent_id", help="the scope's agent")
    parser.add_argument("--session-id", "--session", dest="session_id", help="the scope's session")
    parser.add_argument("--embedder", default=EMBEDDER, help=f"embedder name (default: {EMBEDDER})")
    parser.add_argument(
        "--reach",
        choices=get_args(RecallReach),
        default="agent",
        help="how far recall, list, update and forget reach from the scope, as a memory's "
        "MemoryPolicy.reach (default: agent); remember always writes into the scope itself",
    )
    parser.add_argument(
        "--recent", type=int, default=20, help="memories memcore://recent shows (default: 20)"
    )
    parser.add_argument("--transport", choices=TRANSPORTS, default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable HTTP: address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="streamable HTTP: port (default: 8000)")
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help='streamable HTTP: a JSON file {"<bearer token>": {"tenant": ..., "user_id": ..., '
        '"agent_id": ...}}; each request works in its token\'s scope, unknown tokens get 401',
    )
    parser.add_argument(
        "--purge-on-exit",
        action="store_true",
        help="on shutdown, erase what was deleted or replaced (forget, update, a consolidated note) "
        "from the store's files (store.purge())",
    )
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="WARNING",
        help="default: WARNING",
    )
    parser.set_defaults(run=run)


def _scope(args: argparse.Namespace) -> Scope | None:
    fields = {name: getattr(args, name) for name in ("user_id", "agent_id", "session_id")}
    if args.tokens is not None:
        if args.tenant is not None or any(value is not None for value in fields.values()):
            raise InvalidInputError(
                "--tokens gives each request its scope: leave out --tenant, --user-id, ..."
            )
        if args.transport != "streamable-http":
            raise InvalidInputError("--tokens needs --transport streamable-http")
        return None
    if args.tenant is None:
        raise InvalidInputError("memcore mcp needs --tenant (or --tokens with --transport streamable-http)")
    return Scope(tenant=args.tenant, **fields)


def _check_host(host: str, tokens: str | None) -> None:
    if tokens is not None or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidInputError(
            f"serving one fixed scope on {host} would give it to anyone who reaches the port: "
            "bind a loopback address, or give each client a bearer token with --tokens"
        )


def run(args: argparse.Namespace) -> int:
    """Open the store and the embedder, then serve until the client (or a signal) ends it."""
    scope = _scope(args)
    if args.transport == "streamable-http":
        _check_host(args.host, args.tokens)
    from memcore.integrations.mcp import TokenScopes, build_server  # needs memcore[mcp]

    tokens = None if args.tokens is None else TokenScopes.from_file(args.tokens)
    embedder = open_embedder(args.embedder)
    store = open_store(args.store)
    try:
        server = build_server(
            store,
            embedder,
            scope,
            tokens=tokens,
            reach=args.reach,
            recent=args.recent,
            log_level=args.log_level,
        )
    except BaseException:
        store.close()
        raise
    import anyio

    with _sigterm_as_interrupt(), contextlib.suppress(KeyboardInterrupt):  # _serve closed the store
        anyio.run(_serve, server, store, args)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the server as Ctrl-C does, through the ``finally`` that closes the store.

    uvicorn handles SIGTERM itself while it serves, then raises it again once it has shut down:
    without this handler, that second SIGTERM would kill the process before the store is closed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


async def _serve(server: MemoryServer, store: Store, args: argparse.Namespace) -> None:
    try:
        if args.transport == "stdio":
            await _serve_stdio(server, store, args)
        else:
            await server.mcp.run_streamable_http_async(host=args.host, port=args.port)
    finally:
        await _close(store, args)


async def _close(store: Store, args: argparse.Namespace) -> None:
    import anyio

    with anyio.CancelScope(shield=True):  # an interrupt cancels the serving, not the closing
        try:
            if args.purge_on_exit:
                await store.apurge()
        finally:
            await store.aclose()


async def _serve_stdio(server: MemoryServer, store: Store, args: argparse.Namespace) -> None:
    """Serve over stdin and stdout until stdin ends, or SIGINT or SIGTERM arrives.

    The SDK reads stdin on a worker thread that no cancellation stops (it waits for a line), so
    a signal cannot end the serving while the client keeps stdin open: the store is closed here
    and the process exits at once, as a signal's default action would.
    """
    import anyio

    async def exit_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                await _close(store, args)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)

    async with anyio.create_task_group() as group:
        group.start_soon(exit_on_signal)
        await server.mcp.run_stdio_async()
        group.cancel_scope.cancel()
