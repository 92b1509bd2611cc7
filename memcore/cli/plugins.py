"""``memcore plugins``: list the loaded plugins and what each registers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from memcore.plugins import PluginInfo, plugin_infos

_COLUMNS = ("NAME", "VERSION", "DISTRIBUTION", "HOOKS", "STORES", "EMBEDDERS")


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``plugins`` command to the ``memcore`` parser."""
    parser = subparsers.add_parser(
        "plugins",
        help="list the loaded plugins, with the stores and embedders each registers",
        description="List the loaded plugins: name, version, hooks, and the store URL schemes "
        "and embedders each registers. MEMCORE_LOAD_PLUGINS limits which are loaded.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the plugins as a table, or as JSON with ``--json``."""
    infos = plugin_infos()
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
    else:
        print(format_table(infos))
    return 0


def _cells(info: PluginInfo) -> tuple[str, ...]:
    return (
        info.name,
        info.version or "-",
        info.distribution or "(built-in)",
        ", ".join(info.hooks) or "-",
        ", ".join(f"{scheme}://" for scheme in info.stores) or "-",
        ", ".join(info.embedders) or "-",
    )


def format_table(infos: list[PluginInfo]) -> str:
    """The plugins as an aligned text table, one row per plugin."""
    rows = [_COLUMNS, *(_cells(info) for info in infos)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )
