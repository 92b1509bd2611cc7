"""``memcore.json``: what memcore keeps beside an embedded shard (format, schema version, vector space)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memcore.errors import StoreCorruptedError
from memcore.store import VectorSpace

FORMAT = "memcore-qdrant"
SCHEMA_VERSION = 2
"""2: a point's id is its record's :func:`~memcore.scope.storage_id`, the record id is in its payload.
1: a point's id was its record's id (such a shard is rebuilt when it opens)."""
READABLE_VERSIONS = (1, SCHEMA_VERSION)
FILE_NAME = "memcore.json"


def _read(root: Path) -> dict[str, Any] | None:
    """The contents of the file under ``root``, or ``None`` when there is none yet.

    :raises StoreCorruptedError: if the file is unreadable or not one this plugin wrote.
    """
    path = root / FILE_NAME
    if not path.exists():
        return None
    try:
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise StoreCorruptedError(
            f"{path} is unreadable or not JSON ({exc}); restore it from a backup"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or data.get("schema_version") not in READABLE_VERSIONS
    ):
        raise StoreCorruptedError(
            f"{path} is not a {FORMAT} metadata file of schema version {SCHEMA_VERSION} or earlier"
        )
    return data


def read_version(root: Path) -> int | None:
    """The schema version recorded under ``root`` (``None`` when no file exists yet).

    :raises StoreCorruptedError: if the file is unreadable or not one this plugin wrote.
    """
    data = _read(root)
    return None if data is None else int(data["schema_version"])


def read_space(root: Path) -> VectorSpace | None:
    """The vector space recorded under ``root``, or ``None`` (also when no file exists yet).

    :raises StoreCorruptedError: if the file is unreadable or not one this plugin wrote.
    """
    data = _read(root)
    if data is None:
        return None
    path = root / FILE_NAME
    space = data.get("vector_space")
    if space is None:
        return None
    embedder, dimension = space.get("embedder"), space.get("dimension")
    if not isinstance(embedder, str) or not isinstance(dimension, int) or dimension < 1:
        raise StoreCorruptedError(f"{path} holds an invalid vector space {space!r}")
    return VectorSpace(embedder, dimension)


def write_space(root: Path, space: VectorSpace | None) -> None:
    """Record ``space`` and :data:`SCHEMA_VERSION` under ``root``, atomically (temporary file, fsync,
    rename)."""
    body = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "vector_space": None if space is None else {"embedder": space.embedder, "dimension": space.dimension},
    }
    path = root / FILE_NAME
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(body).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
