"""``memcore export``, ``memcore import`` and ``memcore migrate``: move memories between stores.

The three related commands share this module and its scope options (see
:mod:`memcore.transfer` for the file format and the checks).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError
from memcore.plugins import open_embedder, open_store
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.transfer import (
    Outcome,
    Progress,
    check_entries,
    export,
    import_entries,
    migrate,
    read_export,
)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``export``, ``import`` and ``migrate`` to the ``memcore`` parser."""
    parser = subparsers.add_parser(
        "export",
        help="write a store's records and vectors (one scope, or all) as JSON lines",
        description="Write the records a scope sees (every record without scope options), with their "
        "vectors, as JSON lines: a header, then one record per line.",
    )
    parser.add_argument("url", help="the store to read, such as jsonl:///var/lib/memories")
    parser.add_argument("--out", default="-", help="the file to write (default: standard output)")
    _scope_options(parser)
    parser.set_defaults(run=_run_export)

    parser = subparsers.add_parser(
        "import",
        help="write an export's records into a store",
        description="Write the records of an export into a store (records with the same id are replaced). "
        "The import stays inside the scope the export declares and the one the scope options give: "
        "a line outside either fails the command before anything is written.",
    )
    parser.add_argument("url", help="the store to write into")
    parser.add_argument("file", help="the export to read ('-': standard input)")
    _scope_options(parser, verb="import")
    _embedder_option(parser)
    parser.set_defaults(run=_run_import)

    parser = subparsers.add_parser(
        "migrate",
        help="copy a scope (or everything) from one store to another, and check the copy",
        description="Copy the records a scope sees, with their vectors, from SOURCE to DESTINATION, "
        "then read every record back from DESTINATION and compare it with SOURCE's.",
    )
    parser.add_argument("source", help="the store to read")
    parser.add_argument("destination", help="the store to write into")
    _scope_options(parser, verb="copy")
    _embedder_option(parser)
    parser.set_defaults(run=_run_migrate)


def _scope_options(parser: argparse.ArgumentParser, verb: str = "export") -> None:
    for field in SCOPE_FIELDS:
        option = "--" + field.replace("_", "-")
        parser.add_argument(option, dest=field, help=f"{verb} only records with this {field}")


def _embedder_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embedder",
        help="embed every record again with this embedder (such as "
        "sentence-transformers/all-MiniLM-L6-v2) when the vectors come from another one",
    )


def _scope(args: argparse.Namespace) -> Scope:
    values = {field: getattr(args, field) for field in SCOPE_FIELDS if getattr(args, field) is not None}
    return Scope(**values) if values else Scope.everything()


def _embedder(args: argparse.Namespace) -> Embedder | None:
    return open_embedder(args.embedder) if args.embedder else None


@contextmanager
def _progress(label: str) -> Iterator[Progress]:
    """A progress bar on standard error (with the ``bench`` extra's rich, on a terminal)."""
    try:
        from memcore.bench.progress import ProgressBars

        bars = ProgressBars()
    except ImportError:
        yield lambda done, total: None
        return
    with bars:
        report = bars.labelled(label)
        yield lambda done, total: report("records", done, total)


@contextmanager
def _opened_file(name: str, mode: str) -> Iterator[IO[str]]:
    """``name`` opened for reading, or for writing through a private temporary file (mode 0600)
    renamed into place once everything is written, so a failed export leaves no partial file."""
    if name == "-":
        yield sys.stdout if "w" in mode else sys.stdin
        return
    if "w" not in mode:
        try:
            handle = open(name, encoding="utf-8")  # noqa: SIM115  # closed below; open errors typed
        except OSError as exc:
            raise InvalidInputError(f"cannot open {name}: {exc.strerror}") from None
        with handle:
            yield handle
        return
    target = Path(name)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InvalidInputError(f"cannot write {name}: {exc.strerror}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _report(verb: str, outcome: Outcome, where: str) -> None:
    embedded = ", embedded again" if outcome.embedded_again else ""
    print(
        f"{verb} {outcome.records} records ({outcome.with_vectors} with vectors{embedded}) into {where}",
        file=sys.stderr,
    )


def _run_export(args: argparse.Namespace) -> int:
    with open_store(args.url) as store, _opened_file(args.out, "w") as out, _progress("export") as progress:
        written = export(store, _scope(args), out, progress)
    print(f"exported {written} records from {args.url}", file=sys.stderr)
    return 0


def _run_import(args: argparse.Namespace) -> int:
    embedder = _embedder(args)
    scope = _scope(args)
    with _readable_twice(args.file) as name:
        # First every line is checked (scope, shape, vectors), so a refused line writes nothing.
        with _opened_file(name, "r") as lines:
            space, entries = read_export(lines)
            total = check_entries(entries, scope=scope)
        with (
            _opened_file(name, "r") as lines,
            open_store(args.url) as store,
            _progress("import") as progress,
        ):
            space, entries = read_export(lines)
            outcome = import_entries(
                store, space, entries, scope=scope, embedder=embedder, total=total, progress=progress
            )
    _report("imported", outcome, args.url)
    return 0


@contextmanager
def _readable_twice(name: str) -> Iterator[str]:
    """``name``, or for standard input (``-``) a private temporary copy of it, removed afterwards."""
    if name != "-":
        yield name
        return
    descriptor, temporary = tempfile.mkstemp(prefix="memcore-import-", suffix=".jsonl")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as copy:
            for line in sys.stdin:
                copy.write(line)
        yield temporary
    finally:
        Path(temporary).unlink(missing_ok=True)


def _run_migrate(args: argparse.Namespace) -> int:
    embedder = _embedder(args)
    with (
        open_store(args.source) as source,
        open_store(args.destination) as destination,
        _progress("migrate") as progress,
    ):
        outcome = migrate(source, destination, _scope(args), embedder=embedder, progress=progress)
    _report("copied and checked", outcome, args.destination)
    return 0
