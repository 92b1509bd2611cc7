"""The raw-client baseline: what a plugin's engine costs without memcore in between.

A plugin provides one through the ``memcore_bench_raw_client`` hook (see
:mod:`memcore.bench.hookspecs`). It must do the work a careful user of the raw client
would do for the same result, no less and no more: write the same payloads the
store writes (built by :meth:`RawClient.prepare`, before the clock starts),
filter natively by the same scope, and parse the JSON documents it reads back,
since a user needs the records, not bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from memcore.records import MemoryRecord
from memcore.scope import Scope
from memcore.validation import Matrix


class RawClient(Protocol):
    """One engine driven through its own client library (the adapter-overhead baseline)."""

    def prepare(self, records: Sequence[MemoryRecord], vectors: Matrix) -> Any:
        """What a raw user has at hand before writing: ids, vectors and payloads (not timed)."""

    def add(self, prepared: Any) -> None:
        """Write what :meth:`prepare` returned."""

    def search(self, scope: Scope, vector: Matrix, limit: int) -> list[Any]:
        """The ``limit`` nearest records of ``scope``, parsed."""

    def get(self, scope: Scope, ids: Sequence[UUID]) -> list[Any]:
        """The records of ``scope`` with these ids, parsed."""

    def delete(self, scope: Scope, ids: Sequence[UUID]) -> None:
        """Delete the records of ``scope`` with these ids."""

    def close(self) -> None:
        """Release the client and its files."""
