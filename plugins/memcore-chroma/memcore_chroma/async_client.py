"""chromadb's async client (``AsyncHttpClient``) for one store's reads on one event loop.

chromadb's ``AsyncFastAPI`` keeps its ``httpx.AsyncClient`` objects in a class attribute, shared by
every async client in the process and keyed by the hash (the id) of the loop, and its cleanup
closes all of them: one store closing would cut every other store's requests, and a loop made
where a collected one lived would get that loop's client. chromadb also accepts no subclass of it
(it names the implementations it allows). So :class:`AsyncReader` makes the ``AsyncFastAPI`` of its
own system, gives it a dict of its own before its first request, and wraps the collection in an
``AsyncCollection`` itself (the sync client already checked the tenant and database at open).
"""

from __future__ import annotations

import asyncio
from typing import Any

from chromadb.api.async_fastapi import AsyncFastAPI
from chromadb.api.models.AsyncCollection import AsyncCollection
from chromadb.config import System
from chromadb.errors import NotFoundError

from memcore.errors import StoreClosedError
from memcore.store import SERVER_WORKERS
from memcore_chroma.calls import CollectionCall
from memcore_chroma.connection import client_settings
from memcore_chroma.errors import translated
from memcore_chroma.urls import ServerAddress


class AsyncReader:
    """The async client of one store on one event loop (a :class:`~memcore.loop_bound.LoopBound`),
    and the store's collection through it.

    :param address: the server, tenant and database.
    :param collection: the collection's name.
    """

    def __init__(self, address: ServerAddress, collection: str) -> None:
        self._address, self._name = address, collection
        self._api: AsyncFastAPI | None = None
        self._collection: AsyncCollection | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        self._in_flight = asyncio.Semaphore(SERVER_WORKERS)
        self.write_lock = asyncio.Lock()
        """Serialises the async API's writes on its loop, as the process's write lock does the sync API's."""

    async def make(self, call: CollectionCall) -> Any:
        """Make ``call`` on the collection, errors translated; a collection another client swapped
        (a rebuild) is found again once."""
        # As many requests at once as the sync API's workers make: httpx's async pool slows down as
        # more wait on it (at 64 agents, a third of the thread pool's reads per second unbounded).
        async with self._in_flight:
            with translated(call.action):
                try:
                    collection = await self._opened()
                    return await getattr(collection, call.method)(**call.kwargs)
                except NotFoundError:
                    self._collection = None
                    collection = await self._opened()
                    return await getattr(collection, call.method)(**call.kwargs)

    async def _opened(self) -> AsyncCollection:
        collection = self._collection
        if collection is not None and not self._closed:
            return collection  # every call after the first: no lock
        async with self._opening:
            if self._closed:  # a call that began before the store closed: no new client after close
                raise StoreClosedError("the chroma-http store is closed")
            if self._collection is None:
                if self._api is None:
                    self._api = _own_api(self._address)
                address = self._address
                model = await self._api.get_collection(
                    self._name, tenant=address.tenant, database=address.database
                )
                self._collection = AsyncCollection(client=self._api, model=model, embedding_function=None)
            return self._collection

    async def aclose(self) -> None:
        """Close the client's HTTP connections (on its loop); later calls raise StoreClosedError."""
        self._closed = True
        api, self._api, self._collection = self._api, None, None
        if api is not None:
            await api._cleanup()


def _own_api(address: ServerAddress) -> AsyncFastAPI:
    settings = client_settings()
    settings.chroma_api_impl = "chromadb.api.async_fastapi.AsyncFastAPI"
    settings.chroma_server_host = address.host
    settings.chroma_server_http_port = address.port
    settings.chroma_server_ssl_enabled = address.ssl
    system = System(settings)
    api = system.instance(AsyncFastAPI)
    api._clients = {}  # an instance attribute: this client's own, not the class's shared dict
    system.start()
    return api
