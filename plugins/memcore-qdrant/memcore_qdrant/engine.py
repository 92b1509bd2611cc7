"""What the store needs from a Qdrant engine, whichever one runs underneath.

Two engines implement :class:`Engine`: :class:`~memcore_qdrant.edge_engine.EdgeEngine`
(qdrant-edge-py, the embedded default) and
:class:`~memcore_qdrant.client_engine.ClientEngine` (qdrant-client: a server, or
its slow local mode). Filters arrive as :class:`~memcore_qdrant.filters.Clause`
trees; each engine renders them into its own objects. Engines are not
thread-safe: the store serialises every call under its lock.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from uuid import UUID

from memcore.store import VectorSpace
from memcore_qdrant import payload as fields
from memcore_qdrant.filters import Clause, IndexKind
from memcore_qdrant.keywords import SparseVector


def keep_forever(thing: object) -> None:
    """Never let ``thing`` be deallocated in this process, not even at interpreter exit.

    For what a forked child inherits from its parent and must not tear down: dropping a Qdrant
    Edge shard flushes it (a child did rewrite the parent's segment files), and dropping a
    ``QdrantClient`` closes its connections, which the parent shares. An extra reference
    count is the only way to keep Python's finalisation from running their destructors.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(thing))


VECTOR_NAME = "dense"
"""The named vector that holds a record's embedding (absent on records written without one)."""

SCROLL_PAGE = 1_000
"""Points fetched per scroll request when reading a whole result set."""

Direction = Literal["asc", "desc"]


@dataclass(frozen=True)
class Point:
    """A stored point: its id (its record's :func:`~memcore.scope.storage_id`), its payload, and its
    unit vector if it has one."""

    id: UUID
    payload: dict[str, Any]
    vector: list[float] | None = None


@dataclass(frozen=True)
class Hit:
    """A search result: its score as Qdrant computed it (cosine similarity, or BM25), and its payload.

    No point id: nothing reads it, and qdrant-edge-py builds a ``uuid.UUID`` on every access."""

    score: float
    payload: dict[str, Any]


Fetch = Callable[[Any, int], tuple[list[Point], Any]]
"""One scroll request: ``fetch(offset, size)`` gives the points and the next offset (``None`` at the end)."""


def pages(fetch: Fetch, limit: int | None = None) -> Iterator[list[Point]]:
    """Scroll through a result set page by page (:data:`SCROLL_PAGE` points a page), at most ``limit`` points.

    Both engines read whole result sets through this, and :meth:`Engine.purge` copies
    a shard through it without ever holding more than one page.
    """
    offset: Any = None
    fetched = 0
    while limit is None or fetched < limit:
        size = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - fetched)
        points, offset = fetch(offset, size)
        fetched += len(points)
        yield points
        if offset is None:
            return


MAX_METADATA_INDEXES = 64
"""At most this many metadata payload indexes are made on demand per collection (each costs memory)."""

BUILT_IN_INDEXES = frozenset({*fields.KEYWORD_FIELDS, *fields.INTEGER_FIELDS})
"""The payload indexes every collection gets at creation."""


def indexes_to_create(present: set[str], wanted: set[tuple[str, IndexKind]]) -> list[tuple[str, IndexKind]]:
    """The ``wanted`` metadata indexes missing from ``present`` (index names as Qdrant lists them),
    within :data:`MAX_METADATA_INDEXES`."""
    room = MAX_METADATA_INDEXES - sum(1 for name in present if name not in BUILT_IN_INDEXES)
    missing = [(path, kind) for path, kind in sorted(wanted) if indexed_name(path) not in present]
    return missing[: max(0, room)]


def indexed_name(path: str) -> str:
    """How Qdrant lists the index of a payload path: ``m_int."n"`` as ``m_int.n``.

    Metadata keys are identifiers, so dropping the quotes is unambiguous.
    """
    return path.replace('"', "")


class Engine(Protocol):
    """The operations :class:`~memcore_qdrant.store.QdrantStore` runs against Qdrant."""

    location: str
    """Where the data lives, for messages (a path or a URL)."""

    prunes_live_condition: bool
    """Whether a read first counts the expired points of its scope, and leaves the live condition
    out of its query when there are none (:meth:`~memcore_qdrant.store.QdrantStore._alive_in`).

    True for Qdrant Edge: it checks a ``must_not`` on every point of the scope, which cost a
    vector search over 10,000 points 2 ms beside the search's 1 ms, while that count is answered
    from the ``expires_at`` index in tens of microseconds; and it is exact there, as the store's
    lock keeps writes from coming between the count and the query. False on a server, where the
    count would be another request, and another client could write between the two."""

    def dimension(self) -> int | None:
        """The size of the ``dense`` vector, once one was written (``None`` before)."""
        ...

    def none_expired(self, now: int) -> bool:
        """Whether no stored point can have expired at ``now`` (epoch microseconds), as the engine
        knows without reading a scope; ``False`` when it cannot tell. Asked only by an engine that
        :attr:`prunes_live_condition`, before it counts the expired points of a read's scope."""
        ...

    def add_vectors(self, dimension: int) -> None:
        """Declare the ``dense`` cosine vector of this size; called once, by the first vector write."""
        ...

    def upsert(self, points: Sequence[Point]) -> None:
        """Insert or replace points, waiting until the write is applied."""
        ...

    def replace(self, point: Point, where: Clause) -> None:
        """Overwrite the stored point of ``point``'s id with ``point``, only if it exists and matches
        ``where``, in one step of the engine (Qdrant's conditional upsert: ``update_only`` mode with
        a condition); otherwise write nothing. Waits until applied."""
        ...

    def scroll(
        self,
        where: Clause,
        *,
        limit: int | None = None,
        order: Direction | None = None,
        with_vectors: bool = False,
        whole_payload: bool = False,
    ) -> list[Point]:
        """Points matching ``where``: all of them, or the first ``limit`` by ``created_at`` in ``order``.

        Their payloads hold :data:`~memcore_qdrant.payload.READ_FIELDS` only, unless ``whole_payload``.
        """
        ...

    def query(self, vector: Sequence[float], where: Clause, limit: int) -> list[Hit]:
        """The ``limit`` points with a vector most similar to ``vector``, among those matching ``where``
        (payloads: :data:`~memcore_qdrant.payload.READ_FIELDS`)."""
        ...

    def keyword_query(self, query: SparseVector, where: Clause, limit: int) -> list[Hit]:
        """The ``limit`` points scoring highest on the ``keywords`` sparse vector, among those matching
        ``where`` (points sharing no term with ``query`` are not returned)."""
        ...

    def count(self, where: Clause) -> int:
        """How many points match ``where``, exactly."""
        ...

    def facet(self, key: str, where: Clause, limit: int) -> list[tuple[str, int]]:
        """Up to ``limit`` values of the keyword-indexed payload field ``key`` among the points matching
        ``where``, each with how many of those points hold it, exactly (most frequent first)."""
        ...

    def delete(self, where: Clause) -> None:
        """Delete every point matching ``where``, waiting until applied."""
        ...

    def index_fields(self, wanted: set[tuple[str, IndexKind]]) -> None:
        """Create the payload indexes of ``wanted`` that are missing (within a cap; see the engines)."""
        ...

    def load_space(self) -> VectorSpace | None:
        """The persisted vector-space binding."""
        ...

    def save_space(self, space: VectorSpace) -> None:
        """Persist the vector-space binding."""
        ...

    def purge(self) -> None:
        """Physically remove deleted points from what the engine persists."""
        ...

    def close(self) -> None:
        """Flush and release the engine."""
        ...
