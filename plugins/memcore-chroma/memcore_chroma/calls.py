"""A hook's calls on the collection written once, made through chromadb's sync or async client.

A hook (the store's reads, :mod:`memcore_chroma.reads`, and its writes) is a session (:mod:`memcore.sessions`)
yielding :class:`CollectionCall` objects: the store makes them on a ``Collection`` (the sync API
and its worker threads) or awaits them on an ``AsyncCollection`` (the async API of a Chroma
server), whose methods have the same names and arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

from memcore import sessions

R = TypeVar("R")

Method: TypeAlias = Literal["count", "get", "query", "upsert", "update", "delete"]
"""The collection methods sessions call (the same on ``Collection`` and ``AsyncCollection``)."""


@dataclass(frozen=True, slots=True)
class CollectionCall:
    """``collection.<method>(**kwargs)``, doing ``action`` (for error messages)."""

    action: str
    method: Method
    kwargs: dict[str, Any] = field(default_factory=dict)


Session: TypeAlias = sessions.Session[CollectionCall, R]


def collection_call(action: str, method: Method, **kwargs: Any) -> Session[Any]:
    """Inside a session: ``found = yield from collection_call("reading records", "get", ids=...)``."""
    result = yield CollectionCall(action, method, kwargs)
    return result


def many_entries(result: Any) -> bool:
    """Whether ``result`` (of ``get`` or ``query``) holds :data:`~memcore.sessions.OFFLOAD_AT` entries
    or more."""
    ids = result.get("ids") if isinstance(result, dict) else None
    if not ids:
        return False
    return (len(ids[0]) if isinstance(ids[0], list) else len(ids)) >= sessions.OFFLOAD_AT
