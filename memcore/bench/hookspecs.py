"""The hooks of ``memcore bench``: a plugin's raw-client baseline, and cleaning up after a run.

Added to memcore's plugin manager by :mod:`memcore.bench.plugin` (through the
``memcore_add_hookspecs`` hook), so that the storage contract in :mod:`memcore.hookspecs`
does not depend on the benchmark. Plugins implement them with ``@memcore.hookimpl`` like any
other hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memcore.hookspecs import hookspec

if TYPE_CHECKING:
    from memcore.bench.raw import RawClient


@hookspec(firstresult=True)
def memcore_bench_raw_client(url: str) -> RawClient | None:
    """The engine behind the store ``url`` names, driven through its own client: a baseline.

    Called by ``memcore bench`` once per benchmarked store URL; the first plugin
    returning a client wins. The bench runs the same operations through the store and through this
    client, in the same run, and reports memcore's adapter overhead as the median
    ratio of their times (see :mod:`memcore.bench.overhead`). Import the client
    library inside the implementation.

    :param url: a store URL of a scheme this plugin registered; its path (if any)
        is a fresh folder for the raw client's own data, not the store's.
    :returns: a :class:`memcore.bench.raw.RawClient`, or ``None`` if this plugin
        has no baseline for the URL (the next plugin is asked).
    """


@hookspec(firstresult=True)
def memcore_bench_discard(url: str, name: str) -> bool | None:
    """Drop the table or collection ``name`` that a ``memcore bench`` run made on a server.

    Called by ``memcore bench`` after it closed a store opened at ``url``, when the user's URL
    asked for a fresh name (``{name}``, as in ``postgresql://host/db?collection={name}``), so that
    benchmark runs leave nothing behind on the user's server. The first plugin returning a
    value wins. Import the client library inside the implementation.

    :param url: the URL the store was opened with, ``{name}`` already replaced.
    :param name: the fresh name the run chose. Drop only a table or collection of exactly this
        name: ``{name}`` may stand elsewhere in the URL, which then names a table of the user's.
    :returns: ``True`` once this plugin dropped it, ``False`` if ``url`` is one of this plugin's
        but does not name ``name`` as its table or collection (nothing is dropped), or ``None``
        if the URL is not one this plugin can clean up (the next plugin is asked).
    """
