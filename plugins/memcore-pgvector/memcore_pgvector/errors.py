"""Translate psycopg's exceptions into :mod:`memcore.errors`.

A server that is down, restarting or refusing connections is
:class:`~memcore.errors.StoreUnavailableError` (the pool reconnects once it is
back); anything else the database raises is :class:`~memcore.errors.StoreError`
naming what failed, including a statement over one of PostgreSQL's limits (SQLSTATE
class 54), which no retry can fix. memcore's own errors pass through unchanged.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import psycopg
import psycopg_pool

from memcore import kit
from memcore.errors import MemcoreError, StoreError, StoreUnavailableError


def translate(exc: Exception, action: str, location: str) -> MemcoreError:
    """The memcore error for an exception raised while doing ``action`` on the database at ``location``."""
    if isinstance(exc, MemcoreError):
        return exc
    never = isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("54")  # program limit
    if not never and isinstance(
        exc, psycopg.OperationalError | psycopg_pool.PoolTimeout | psycopg.InterfaceError
    ):
        return StoreUnavailableError(
            f"PostgreSQL at {location} could not be reached while {action} ({exc}); retry once it is back"
        )
    return StoreError(f"PostgreSQL at {location} failed while {action}: {type(exc).__name__}: {exc}")


def translated(action: str, location: str) -> AbstractContextManager[None]:
    """Re-raise anything but a memcore error as the memcore error :func:`translate` gives."""
    return kit.translated(lambda exc: translate(exc, action, location))
