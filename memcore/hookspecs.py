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


@hookspec
def memcore_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add the hook specifications of a part of memcore, or of a plugin, that has hooks of its own.

    Called once when memcore loads its plugins, after the built-ins and every selected entry
    point are registered and before memcore checks that each hook a plugin implements exists.
    ``memcore bench`` adds its hooks this way (:mod:`memcore.bench.hookspecs`), so that this
    module, the storage contract, knows nothing of benchmarks.

    :param plugin_manager: the manager being loaded; call its ``add_hookspecs(module)``.
    :returns: nothing; the return value is ignored.
    """
