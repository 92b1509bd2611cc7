"""Request objects: a store read, validated once, as the backend hooks receive it.

:class:`~memcore.store.BaseStore` builds these from the public call's arguments
(checking every one, the same way for every backend) and hands them to the
backend's ``_list``, ``_search`` and ``_keyword_search`` hooks together with the
scope. A hook therefore never parses or re-checks anything, and a new read
option is one field here, not a new positional argument in every backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Self

from memcore.filters import Comparison, Filter
from memcore.validation import Matrix

Order = Literal["asc", "desc"]
"""``"asc"``: oldest first; ``"desc"``: newest first (ties by record id, in the same direction)."""


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Records in ``created_at`` order (then id).

    :param filter: the parsed filter, or ``None`` for every record of the scope.
    :param order: ``"asc"`` or ``"desc"``.
    :param limit: at most this many, after ordering; ``None`` for all.
    :param before: only records created strictly before this time (UTC).
    :param after: only records created strictly after this time (UTC).
    """

    filter: Filter | None = None
    order: Order = "asc"
    limit: int | None = None
    before: datetime | None = None
    after: datetime | None = None

    def with_filter(self, node: Filter | None, *, limit: int | None) -> Self:
        """This query with another filter and limit (what the exact fallback pushes down)."""
        return replace(self, filter=node, limit=limit)

    def time_bounds(self) -> list[Comparison]:
        """:attr:`after` and :attr:`before` as the ``created_at`` comparisons they are."""
        bounds = [] if self.after is None else [Comparison("created_at", "$gt", self.after)]
        return bounds + ([] if self.before is None else [Comparison("created_at", "$lt", self.before)])

    def without_time_bounds(self, bounds: list[Comparison]) -> Self:
        """This query without those of its :meth:`time_bounds` in ``bounds``."""
        kept = {bound.op: bound.value for bound in self.time_bounds() if bound not in bounds}
        return replace(self, after=kept.get("$gt"), before=kept.get("$lt"))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, eq=False)
class SearchQuery:
    """The best matches by vector similarity and/or text.

    :param vector: the query as one unit-length float32 row, or ``None`` for a text-only search.
    :param text: a case-insensitive substring the content must contain, or ``None``.
    :param filter: the parsed filter, or ``None``.
    :param limit: at most this many hits, best first (newest first for text alone).
    """

    vector: Matrix | None
    text: str | None
    filter: Filter | None
    limit: int

    def with_filter(self, node: Filter | None, *, limit: int) -> Self:
        """This query with another filter and limit (what the exact fallback pushes down)."""
        return replace(self, filter=node, limit=limit)


@dataclass(frozen=True, slots=True)
class KeywordQuery:
    """BM25 ranking of the records sharing a term with ``keywords``.

    :param keywords: the query text (non-empty).
    :param filter: the parsed filter, or ``None``.
    :param limit: at most this many hits, best first; ``None`` for every record that scores.
    """

    keywords: str
    filter: Filter | None
    limit: int | None
