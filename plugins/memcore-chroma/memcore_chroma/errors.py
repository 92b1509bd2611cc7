"""Translate chromadb's exceptions into :mod:`memcore.errors`.

Nothing raised by chromadb, httpx or the Rust bindings leaves the store
untranslated: an unreachable or restarting server is
:class:`~memcore.errors.StoreUnavailableError` (retry once it is back), a vector
of the wrong size :class:`~memcore.errors.DimensionMismatchError`, a full disk
:class:`~memcore.errors.StoreFullError`, anything else
:class:`~memcore.errors.StoreError` naming what failed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import httpx
from chromadb.errors import ChromaError, InvalidArgumentError, NotFoundError

from memcore import kit
from memcore.errors import (
    DimensionMismatchError,
    MemcoreError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
)

_UNREACHABLE_MESSAGES = ("could not connect", "connection refused", "connection reset")
_FULL_DISK_MESSAGES = ("disk is full", "no space left")
"""What SQLite and the OS say of a full disk, in the messages Chroma passes on."""


class ExclusiveMaintenanceError(StoreError):
    """The operation rebuilds the collection, which is only safe while no other client uses it.

    On a Chroma server, other processes may write to the collection at any
    time; a rebuild (copy, drop, rename) would lose what they write meanwhile.
    Run :meth:`memcore_chroma.ChromaHttpStore.rebuild_exclusively` during
    maintenance, while no other client uses the collection.
    """


def _unavailable(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError | ConnectionError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, ValueError | ChromaError) and any(
        text in str(exc).lower() for text in _UNREACHABLE_MESSAGES
    )


def translate(exc: Exception, action: str) -> MemcoreError:
    """The memcore error for a chromadb exception raised while doing ``action``."""
    if isinstance(exc, MemcoreError):
        return exc
    if _unavailable(exc):
        return StoreUnavailableError(
            f"the Chroma server could not be reached while {action} ({exc}); retry once it is back"
        )
    if any(text in str(exc).lower() for text in _FULL_DISK_MESSAGES):
        return StoreFullError(
            f"the filesystem of the Chroma store is full ({action}: {exc}); free space and retry"
        )
    if isinstance(exc, InvalidArgumentError) and "dimension" in str(exc).lower():
        return DimensionMismatchError(f"Chroma refused a vector while {action}: {exc}")
    if isinstance(exc, NotFoundError) and any(word in str(exc).lower() for word in ("tenant", "database")):
        return StoreError(
            f"the Chroma server has no such tenant or database while {action} ({exc}); "
            "check ?tenant= and ?database="
        )
    if isinstance(exc, NotFoundError):
        return StoreError(f"the Chroma collection disappeared while {action} ({exc}); reopen the store")
    return StoreError(f"Chroma failed while {action}: {type(exc).__name__}: {exc}")


def partly_written(error: MemcoreError, written: int, total: int) -> MemcoreError:
    """``error``, of the same type, saying that the first ``written`` records of a batch of
    ``total`` are stored (written in earlier calls) and the rest are not."""
    return type(error)(
        f"{error} -- the first {written} of the batch's {total} records were stored "
        "(Chroma writes a large batch in several calls); the rest were not"
    )


def translated(action: str) -> AbstractContextManager[None]:
    """Run the block, re-raising any exception as its :func:`translate` counterpart.

    :param action: what the block does, for the message ("counting records").
    """
    return kit.translated(lambda exc: translate(exc, action))
