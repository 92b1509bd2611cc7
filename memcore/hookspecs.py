"""The hooks memcore plugins implement, and the markers to declare them.

A plugin is a module (or object) with functions marked ``@hookimpl`` whose
names are the hooks below. Installed distributions announce their plugin in
the ``memcore`` entry-point group::

    [project.entry-points.memcore]
    my-store = "my_package.plugin"

memcore's own stores and embedders are registered through these same hooks, by
:mod:`memcore.builtin_plugins`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from memcore.bench.raw import RawClient
    from memcore.embedders.base import Embedder
    from memcore.store import BaseStore

hookspec = pluggy.HookspecMarker("memcore")
"""Marks a function of this module as a hook specification."""

hookimpl = pluggy.HookimplMarker("memcore")
"""Marks a plugin function as the implementation of the hook of the same name.

Also available as ``memcore.hookimpl``.
"""


@hookspec
def memcore_register_stores(register: Callable[[type[BaseStore]], None]) -> None:
    """Register the store classes this plugin provides.

    Called once per plugin whenever memcore builds its table of URL schemes:
    by :func:`memcore.open_store`, :func:`memcore.plugins.store_classes` and
    ``memcore plugins``. Import heavy client libraries inside the
    implementation, not at module level, so that loading plugins stays cheap.

    :param register: call it once per store class, as ``register(MyStore)``.
        The class subclasses :class:`memcore.store.BaseStore` and provides
        ``name``, ``schemes`` (the URL schemes it opens, such as
        ``("qdrant", "qdrant+http")``) and the ``from_url`` classmethod.
        A scheme claimed by two plugins makes every lookup fail with
        :class:`~memcore.errors.PluginError`.
    :returns: nothing; the return value is ignored.
    """


@hookspec
def memcore_register_embedders(register: Callable[[str, Callable[..., Embedder]], None]) -> None:
    """Register the embedders this plugin provides.

    Called once per plugin whenever memcore builds its table of embedders: by
    :func:`memcore.open_embedder`, :func:`memcore.plugins.embedder_factories`
    and ``memcore plugins``. Registering must not load a model; the factory
    does that when :func:`memcore.open_embedder` calls it.

    :param register: call it once per embedder, as ``register(name, factory)``.
        ``name`` is what users pass to :func:`memcore.open_embedder` (such as
        ``"hash"`` or ``"sentence-transformers/all-MiniLM-L6-v2"``);
        ``factory(**options)`` returns a :class:`memcore.embedders.base.Embedder`.
        A name claimed by two plugins makes every lookup fail with
        :class:`~memcore.errors.PluginError`.
    :returns: nothing; the return value is ignored.
    """


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
    asked for a fresh name (``{name}``, as in ``postgresql://host/db?table={name}``), so that
    benchmark runs leave nothing behind on the user's server. The first plugin returning a
    value wins. Import the client library inside the implementation.

    :param url: the URL the store was opened with, ``{name}`` already replaced.
    :param name: the fresh name the run chose. Drop only a table or collection of exactly this
        name: ``{name}`` may stand elsewhere in the URL, which then names a table of the user's.
    :returns: ``True`` once this plugin dropped it, ``False`` if ``url`` is one of this plugin's
        but does not name ``name`` as its table or collection (nothing is dropped), or ``None``
        if the URL is not one this plugin can clean up (the next plugin is asked).
    """
