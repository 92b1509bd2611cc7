"""The exceptions memcore raises.

Every error a caller can provoke with bad input or a bad state derives from
:class:`MemcoreError`, so ``except MemcoreError`` catches all of them and nothing
from deep inside a database client leaks out untranslated. Backends subclass
these; they never invent a parallel hierarchy.

Two families matter to callers:

* :class:`InvalidInputError` (also a :class:`ValueError`): the call was wrong and
  nothing was changed. Fix the input and call again.
* :class:`StoreError`: the store could not do what was asked (closed, locked by
  another process, unreachable, corrupted on disk).
"""

from __future__ import annotations


class MemcoreError(Exception):
    """Root of every exception memcore raises on purpose."""


class InvalidInputError(MemcoreError, ValueError):
    """The call's arguments are invalid; nothing stored was changed."""


class ScopeError(InvalidInputError):
    """A scope value is empty, too long, path-like or otherwise not allowed."""


class InvalidRecordError(InvalidInputError):
    """A record (or message) does not satisfy memcore's record model."""


class RecordTooLargeError(InvalidRecordError):
    """A record's serialised form exceeds :data:`memcore.validation.MAX_RECORD_BYTES`."""


class InvalidIdError(InvalidInputError):
    """A record id is not a well-formed UUID."""


class AmbiguousIdError(InvalidInputError):
    """An id names records in several exact scopes within the scope asked, where only one may answer.

    A record is its exact scope plus its id, so two scopes may each have a record
    with the same id; :meth:`memcore.store.Store.vectors` refuses to pick one.
    Ask each record's exact scope instead.
    """


class RecordNotFoundError(MemcoreError, LookupError):
    """No live record has this id in the scope asked (``update`` of a record that does not exist,
    was deleted, or has expired)."""


class InvalidVectorError(InvalidInputError):
    """A vector is empty, all zeros, or holds NaN, infinity or values beyond float32."""


class DimensionMismatchError(InvalidVectorError):
    """A vector's dimension differs from the one the store was created with."""


class FilterError(InvalidInputError):
    """A filter is malformed: unknown operator or field, or a value of the wrong type."""


class InvalidLimitError(InvalidInputError):
    """A ``limit`` is not a positive integer within the allowed maximum."""


class ContextBudgetError(InvalidInputError):
    """A token budget cannot be met: it is not positive, or the pinned system message alone exceeds it."""


class EmbedderMismatchError(InvalidInputError):
    """An embedder differs (by name or dimension) from the one the store's vectors came from."""


class IncompleteImportError(MemcoreError):
    """An import failed after storing some of its records, which stay stored.

    :param stored: how many records were stored (or replaced) before the failure.
    :param cause: the error that stopped the import (also ``__cause__``).
    """

    def __init__(self, stored: int, cause: MemcoreError) -> None:
        super().__init__(
            f"{cause} -- the import stopped there: the {stored} records before it were stored "
            "(records with the same id replaced), nothing after it"
        )
        self.stored = stored
        self.cause = cause


class StoreError(MemcoreError):
    """The store could not perform the operation."""


class StoreClosedError(StoreError):
    """The store was used after :meth:`close`."""


class StoreLockedError(StoreError):
    """Another process (or another open store object) holds this store's path."""


class StoreForkedError(StoreError):
    """The store object was opened in another process, which this one was forked from.

    An embedded engine's files, locks and caches belong to the process that opened them, so a
    forked child (a gunicorn ``--preload`` worker, a celery prefork worker) refuses to use them
    rather than corrupt them; open the store again in the child (a ``post_fork`` hook). Stores
    that talk to a server reconnect in the child instead and never raise this.
    """


class StoreFullError(StoreError):
    """The store's filesystem is too full for a write to be safe; the write was refused.

    Nothing of a refused write is stored, and reads still work. Free space on the store's
    filesystem and retry. (Qdrant Edge memory-maps its files, and a write into them on a full
    filesystem would kill the process with ``SIGBUS``: the plugin refuses before.)
    """


class StoreCorruptedError(StoreError):
    """The store's files are damaged beyond what it can skip or recover."""


class ConflictError(StoreError):
    """What was read has changed in the store since: another writer got there first. Reload and retry."""


class StoreUnavailableError(StoreError):
    """A store server cannot be reached; the call may succeed once it is back."""


class UnsupportedOperationError(StoreError):
    """The store does not implement this operation (a plugin written before it existed)."""


class PluginError(MemcoreError):
    """A plugin is broken: it failed to load or registered something invalid."""


class UnknownPluginError(MemcoreError, KeyError):
    """No installed plugin provides the requested store scheme or embedder name."""

    def __str__(self) -> str:
        # KeyError.__str__ would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""
