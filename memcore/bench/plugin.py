"""``memcore bench``'s plugin: it adds the bench's hooks to memcore's plugin manager.

Registered by :mod:`memcore.plugin_manager` beside :mod:`memcore.builtin_plugins`.
"""

from __future__ import annotations

import pluggy

from memcore.bench import hookspecs
from memcore.hookspecs import hookimpl


@hookimpl
def memcore_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add :mod:`memcore.bench.hookspecs`."""
    plugin_manager.add_hookspecs(hookspecs)
