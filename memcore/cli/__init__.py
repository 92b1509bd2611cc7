"""The ``memcore`` command line.

Each command lives in its own module of this package, which provides
``add_parser(subparsers)``: it adds the command's parser and sets ``run`` (a
function taking the parsed arguments and returning the exit status) as the
parser's default (a module may add a few related commands, as :mod:`~memcore.cli.transfer`
does). Adding a command means adding a module and listing it in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from memcore.cli import bench, demo, mcp, plugins, transfer
from memcore.errors import MemcoreError

COMMANDS = (bench, demo, mcp, plugins, transfer)
"""The command modules, in the order ``memcore --help`` lists them."""


def _installed_version() -> str:
    try:
        return importlib.metadata.version("memcore")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``memcore`` and all its commands."""
    parser = argparse.ArgumentParser(
        prog="memcore", description="Scoped, searchable memory for AI agents, on pluggable stores."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_installed_version()}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``memcore`` with ``argv`` (default: the process's arguments).

    :returns: the exit status: 0 on success, 1 when memcore reported an error
        (printed to standard error), 2 when no command is given (help is printed).
        Invalid arguments exit with status 2, as argparse does.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.run(args)
    except MemcoreError as exc:
        print(f"memcore: error: {exc}", file=sys.stderr)
        return 1
    return status
