"""Which reads try a shortcut first: a store remembers the selections whose shortcut missed.

Three reads have a cheap way that works for most agents and a sure way that always works:

* a scope's newest records are usually newer than the oldest record of its last window
  (:func:`~memcore_chroma.reads.newest_since`, :class:`Hints`), or among the entries
  inserted last into the collection (:func:`~memcore_chroma.reads.newest_from_tail`), else its
  ids are listed under a ``where``;
* a selective filter (a session's pinned system message) selects few entries of the whole
  collection (:func:`~memcore_chroma.reads.selected_across_scopes`), else it is asked with the
  scope's clauses;
* a search of a scope that holds much of the collection finds its hits among the collection's
  nearest entries, unfiltered (:func:`~memcore_chroma.reads.unfiltered_search`), else Chroma
  searches under the scope's ``where``, which it evaluates over every entry the ``where`` matches.

A shortcut that misses costs one call more than the sure way alone, so a selection whose shortcut
missed skips it for its next :data:`SKIPS_AFTER_A_MISS` reads, then tries it again (a session grows
into its tail; an owner that others outgrew stops finding its hits unfiltered).
"""

from __future__ import annotations

SKIPS_AFTER_A_MISS = 8
"""Reads of a selection that go the sure way after its shortcut missed."""

REMEMBERED = 4_096
"""How many selections' misses a store remembers (then it forgets them all)."""


class Misses:
    """Selections (``where`` documents as JSON) whose shortcut missed, and the reads each skips it still.

    Shared by a store's threads without a lock: a lost update only moves when a shortcut is tried.
    """

    def __init__(self) -> None:
        self._skips: dict[str, int] = {}

    def worth_trying(self, selection: str) -> bool:
        """Whether a read of ``selection`` tries the shortcut (counting a skip if not)."""
        left = self._skips.get(selection)
        if left is None:
            return True
        if left <= 1:
            self._skips.pop(selection, None)
        else:
            self._skips[selection] = left - 1
        return False

    def missed(self, selection: str) -> None:
        """The shortcut did not answer a read of ``selection``: skip it for a while."""
        if len(self._skips) >= REMEMBERED:
            self._skips.clear()
        self._skips[selection] = SKIPS_AFTER_A_MISS


class Hints:
    """A number remembered per selection, from its last read, that makes its next read cheaper:
    the time (epoch microseconds) of the oldest record of its last window, or how deep in the
    collection's nearest entries its last unfiltered search found its hits.

    Hints only: :func:`~memcore_chroma.reads.newest_since` answers from a window's bound only when
    at least a window's worth of the scope's records are that new, and a search's depth only sizes
    its first page, so a stale hint costs a read, never a record.
    """

    def __init__(self) -> None:
        self._hints: dict[str, int] = {}

    def get(self, selection: str) -> int | None:
        """The hint last remembered for ``selection``, if any."""
        return self._hints.get(selection)

    def remember(self, selection: str, hint: int | None) -> None:
        """Remember ``hint`` for ``selection`` (``None``: forget it)."""
        if hint is None:
            self._hints.pop(selection, None)
            return
        if len(self._hints) >= REMEMBERED:
            self._hints.clear()
        self._hints[selection] = hint
