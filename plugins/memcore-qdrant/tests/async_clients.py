"""Stand-ins for a Qdrant server's ``AsyncQdrantClient``, over qdrant-client's local mode.

No Qdrant server runs here, and qdrant-client's local mode lets one client at a time use a folder,
so the store's sync client and an async one cannot both open it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memcore_qdrant import QdrantStore
from memcore_qdrant.client_engine import ClientEngine
from memcore_qdrant.connections import connect_local_client
from qdrant_client import QdrantClient


class ThreadedAsyncClient:
    """``AsyncQdrantClient``'s interface over the store's own sync local client: each call on a
    thread of its own, under the engine's lock (local mode is not thread-safe)."""

    def __init__(self, client: QdrantClient, lock: Any) -> None:
        self._client, self._lock = client, lock
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)

            def locked() -> Any:
                with self._lock:
                    return method(*args, **kwargs)

            return await asyncio.to_thread(locked)

        return call

    async def close(self) -> None:
        """The sync client is the store's: it closes it."""


def native_local_store(path: Path) -> QdrantStore:
    """A store on qdrant-client's local mode in ``path`` whose async API awaits its hooks on a
    :class:`ThreadedAsyncClient`, as a server store's awaits them on ``AsyncQdrantClient``."""
    connection = connect_local_client(path)
    engine = connection.engine
    assert isinstance(engine, ClientEngine)
    client = engine._client
    return QdrantStore(
        dataclasses.replace(connection, new_async_client=lambda: ThreadedAsyncClient(client, connection.lock))
    )
