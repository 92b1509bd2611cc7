"""Loading plugins: the process's pluggy plugin manager.

Plugins are loaded lazily, once per process, on the first call that needs
them: memcore's hook specifications (:mod:`memcore.hookspecs`), then its
built-in plugins (:mod:`memcore.builtin_plugins`, and :mod:`memcore.bench.plugin`, which adds
the bench's hooks), then the installed distributions' plugins from the ``memcore`` entry-point
group. What they register is read by :mod:`memcore.plugins`.

Environment variables:

``MEMCORE_LOAD_PLUGINS``
    Unset: load every installed plugin. Empty: load none (only the built-ins).
    A comma-separated list: load only these, each named by its entry-point name
    or its distribution name; naming one that is not installed is an error.
``MEMCORE_TRACE_PLUGINS``
    ``1``: write every hook call and its result to standard error.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
import threading

import pluggy

from memcore import builtin_plugins, hookspecs
from memcore.bench import plugin as bench_plugin
from memcore.errors import PluginError

ENTRY_POINT_GROUP = "memcore"
"""The entry-point group in which distributions announce memcore plugins."""

LOAD_PLUGINS_ENV = "MEMCORE_LOAD_PLUGINS"
TRACE_PLUGINS_ENV = "MEMCORE_TRACE_PLUGINS"

BUILTIN_PLUGIN_NAME = builtin_plugins.__name__
"""The name memcore's built-in plugin is registered under."""
BENCH_PLUGIN_NAME = bench_plugin.__name__
"""The name the bench's plugin (its hook specifications) is registered under."""

_manager: pluggy.PluginManager | None = None
_manager_lock = threading.Lock()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, with every selected plugin loaded.

    Loads plugins on the first call (thread-safe) and returns the same manager
    afterwards. If loading fails, nothing is kept and the next call tries again.

    :raises PluginError: if a plugin cannot be imported or registered, implements
        an unknown hook, or ``MEMCORE_LOAD_PLUGINS`` names a plugin that is not installed.
    """
    global _manager
    manager = _manager
    if manager is None:
        with _manager_lock:
            if _manager is None:
                _manager = _load_plugin_manager()
            manager = _manager
    return manager


def reset_plugin_manager() -> None:
    """Forget the loaded plugins; the next call loads them again.

    For tests that change ``MEMCORE_LOAD_PLUGINS``, and for programs that
    installed a plugin at run time and want it found without restarting.
    """
    global _manager
    with _manager_lock:
        _manager = None
        # Lets the next load see distributions installed since the last one.
        importlib.invalidate_caches()


def _load_plugin_manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
    trace = os.environ.get(TRACE_PLUGINS_ENV, "")
    if trace not in ("", "0"):
        manager.trace.root.setwriter(_write_stderr)
        manager.enable_tracing()
    manager.add_hookspecs(hookspecs)
    manager.register(builtin_plugins, name=BUILTIN_PLUGIN_NAME)
    manager.register(bench_plugin, name=BENCH_PLUGIN_NAME)
    for entry_point in _selected_entry_points():
        try:
            manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=entry_point.name)
        except Exception as exc:
            raise PluginError(
                f"cannot load the memcore plugin {_describe_entry_point(entry_point)}: {exc}. "
                f"Upgrade or uninstall it, or leave it out with {LOAD_PLUGINS_ENV}"
            ) from exc
    manager.hook.memcore_add_hookspecs(plugin_manager=manager)
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"the memcore plugin {manager.get_name(exc.plugin)!r} implements a hook memcore does not "
            f"have ({exc}); the hooks are listed in memcore.hookspecs. Fix the plugin or uninstall it"
        ) from exc
    return manager


def _write_stderr(text: str) -> None:
    # Looked up on each call, so that redirected stderr (pytest's capture) is honoured.
    sys.stderr.write(text)


def _normalize_distribution_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distribution_key(entry_point: importlib.metadata.EntryPoint) -> str | None:
    dist = entry_point.dist
    return None if dist is None else _normalize_distribution_name(dist.name)


def _describe_entry_point(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    if dist is None:
        return repr(entry_point.name)
    return f"{entry_point.name!r} ({dist.name} {dist.version})"


def _selected_entry_points() -> list[importlib.metadata.EntryPoint]:
    installed = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    by_name: dict[str, importlib.metadata.EntryPoint] = {}
    for entry_point in installed:
        other = by_name.setdefault(entry_point.name, entry_point)
        if other is not entry_point:
            raise PluginError(
                f"two installed distributions provide the memcore plugin {entry_point.name!r}: "
                f"{_describe_entry_point(other)} and {_describe_entry_point(entry_point)}; uninstall one"
            )
    selection = os.environ.get(LOAD_PLUGINS_ENV)
    if selection is None:
        return installed
    wanted = [name.strip() for name in selection.split(",") if name.strip()]
    chosen: dict[str, importlib.metadata.EntryPoint] = {}
    unknown: list[str] = []
    for name in wanted:
        normalized = _normalize_distribution_name(name)
        matches = [
            entry_point
            for entry_point in installed
            if entry_point.name == name or _distribution_key(entry_point) == normalized
        ]
        if not matches:
            unknown.append(name)
        chosen.update((entry_point.name, entry_point) for entry_point in matches)
    if unknown:
        available = ", ".join(_describe_entry_point(entry_point) for entry_point in installed) or "none"
        raise PluginError(
            f"{LOAD_PLUGINS_ENV} names {', '.join(map(repr, unknown))}, but no installed distribution "
            f"provides such a memcore plugin (installed plugins: {available}). Install it, or fix "
            f"{LOAD_PLUGINS_ENV}: a comma-separated list of plugin or distribution names, empty for none"
        )
    return list(chosen.values())
