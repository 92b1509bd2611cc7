"""A store hook's engine calls, and the engine's client calls, written once for both APIs.

A hook of :class:`~memcore_qdrant.store.QdrantStore` is a session (:mod:`memcore.sessions`) that
yields :class:`EngineCall` objects: the sync API makes them on the store's
:class:`~memcore_qdrant.engine.Engine`. For the async API of a server store, an engine call whose
:class:`~memcore_qdrant.client_engine.ClientEngine` method has a ``<name>_calls`` session (the
reads and writes of every turn) is that session's :class:`ClientCall` objects awaited on
``AsyncQdrantClient``, whose methods have the same names and arguments as ``QdrantClient``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeAlias, TypeVar

from memcore import sessions

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class EngineCall:
    """``engine.<name>(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClientCall:
    """``client.<method>(*args, **kwargs)`` on ``QdrantClient`` or ``AsyncQdrantClient``."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


Session: TypeAlias = sessions.Session[EngineCall, R]
ClientSession: TypeAlias = sessions.Session[ClientCall, R]


def engine_call(method: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> Session[R]:
    """Inside a hook's session: ``points = yield from engine_call(self._engine.scroll, where)``,
    typed like the engine's method (called by name on whichever engine runs the session)."""
    result: R = yield EngineCall(method.__name__, args, kwargs)
    return result
