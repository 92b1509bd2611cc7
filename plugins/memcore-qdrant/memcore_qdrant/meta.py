"""``memcore.json``: what memcore keeps beside an embedded shard (format, vector space)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memcore.errors import StoreCorruptedError
from memcore.store import VectorSpace

FORMAT = "memcore-qdrant"
SCHEMA_VERSION = 1
FILE_NAME = "memcore.json"


def read_space(root: Path) -> VectorSpace | None:
    """The vector space recorded under ``root``, or ``None`` (also when no file exists yet).

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
        or data.get("schema_version") != SCHEMA_VERSION
    ):
        raise StoreCorruptedError(f"{path} is not a {FORMAT} v{SCHEMA_VERSION} metadata file")
    space = data.get("vector_space")
    if space is None:
        return None
    embedder, dimension = space.get("embedder"), space.get("dimension")
    if not isinstance(embedder, str) or not isinstance(dimension, int) or dimension < 1:
        raise StoreCorruptedError(f"{path} holds an invalid vector space {space!r}")
    return VectorSpace(embedder, dimension)


def write_space(root: Path, space: VectorSpace | None) -> None:
    """Record ``space`` under ``root``, atomically (temporary file, fsync, rename)."""
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
