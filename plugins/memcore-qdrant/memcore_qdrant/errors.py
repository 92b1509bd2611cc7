"""Translation of Qdrant's exceptions into :mod:`memcore.errors`.

qdrant-client raises httpx, grpc and its own exceptions; qdrant-edge-py raises
plain ``Exception``/``ValueError`` with the engine's message. Callers of a
memcore store only ever see :class:`~memcore.errors.MemcoreError` subclasses,
so every engine call of the plugin runs inside :func:`translated`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import httpx
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from memcore import kit
from memcore.errors import StoreError, StoreUnavailableError


class IncompatibleCollectionError(StoreError):
    """The Qdrant collection (or embedded shard) was created with settings memcore cannot use.

    For example a vector named ``dense`` with another distance than cosine, or a
    dimension that differs from the vector space bound to the store. memcore never
    rewrites such a collection: point the store at another collection or path.
    """


class IncompatibleServerError(StoreError):
    """The Qdrant server is older than memcore-qdrant needs.

    Checked when a ``qdrant+http(s)://`` store opens, against
    :data:`memcore_qdrant.client_engine.MIN_SERVER_VERSION`; upgrade the server.
    """


_UNAVAILABLE_STATUS = frozenset({502, 503, 504})


def translated(action: str, where: str) -> AbstractContextManager[None]:
    """Run an engine call, turning any client exception into a memcore error (:func:`translate`)."""
    return kit.translated(lambda exc: translate(exc, action, where))


def translate(exc: Exception, action: str, where: str) -> StoreError:
    """The memcore error for a Qdrant client's exception.

    :param action: what was being done, for the message (``"search"``).
    :param where: the store's location, for the message.
    :returns: :class:`StoreUnavailableError` when a server cannot be reached or is overloaded,
        else :class:`StoreError`.
    """
    if isinstance(exc, httpx.TransportError | ResponseHandlingException | ConnectionError | TimeoutError):
        return StoreUnavailableError(
            f"the Qdrant server at {where} cannot be reached ({action}: {_describe(exc)}); "
            "check that it is running and that the URL and QDRANT_API_KEY are right"
        )
    if isinstance(exc, UnexpectedResponse):
        if exc.status_code in _UNAVAILABLE_STATUS:
            return StoreUnavailableError(
                f"the Qdrant server at {where} is unavailable ({action}: HTTP {exc.status_code})"
            )
        return StoreError(f"Qdrant at {where} refused to {action}: {_describe(exc)}")
    return StoreError(f"Qdrant at {where} failed to {action}: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
