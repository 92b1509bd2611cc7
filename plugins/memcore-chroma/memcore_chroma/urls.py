"""Parse the URLs of the Chroma stores.

========================================  ==========================================
``chroma:///abs/path``, ``chroma://rel``  embedded, durable (``PersistentClient``)
``chroma+memory://``                      in memory, private to the store (``EphemeralClient``)
``chroma+http://host:port``               a Chroma server (``HttpClient``); ``chroma+https://``
========================================  ==========================================

Query parameters: ``collection`` (default ``memcore``), ``dimension`` and
``ef_search`` for the embedded and server forms, plus ``tenant`` and
``database`` for a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

from memcore.errors import InvalidInputError

DEFAULT_PORT = 8000


@dataclass(frozen=True)
class ServerAddress:
    """Where a Chroma server is, and which tenant and database to use."""

    host: str
    port: int
    ssl: bool
    tenant: str = DEFAULT_TENANT
    database: str = DEFAULT_DATABASE


def split_query(url: str, allowed: frozenset[str]) -> tuple[str, dict[str, str]]:
    """Split ``url`` into what precedes ``?`` and its parameters.

    :raises InvalidInputError: for an unknown or repeated parameter.
    """
    base, _, query = url.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    params = dict(pairs)
    unknown = sorted(set(params) - allowed)
    if unknown or len(params) != len(pairs):
        raise InvalidInputError(
            f"{url!r}: unknown or repeated parameters {unknown or sorted(params)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    return base, params


def _positive_int(params: dict[str, str], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    number = int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else 0
    if number < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
    return number


def dimension_param(params: dict[str, str]) -> int | None:
    """The ``dimension`` parameter as an int, if given.

    :raises InvalidInputError: if it is not a positive integer.
    """
    return _positive_int(params, "dimension")


def ef_search_param(params: dict[str, str]) -> int | None:
    """The ``ef_search`` parameter (HNSW candidates a search explores) as an int, if given.

    :raises InvalidInputError: if it is not a positive integer (the store checks its range).
    """
    return _positive_int(params, "ef_search")


def exclusive_param(params: dict[str, str]) -> bool:
    """The ``exclusive`` parameter (``true``/``1`` or ``false``/``0``; false when absent).

    :raises InvalidInputError: for any other value.
    """
    value = params.get("exclusive", "false")
    if value not in ("true", "1", "false", "0"):
        raise InvalidInputError(f"exclusive must be 'true' or 'false', got {value!r}")
    return value in ("true", "1")


def embedded_path(url: str) -> tuple[str, dict[str, str]]:
    """The folder and parameters of ``chroma:///abs/path`` or ``chroma://rel/path``."""
    base, params = split_query(url, frozenset({"collection", "dimension", "ef_search"}))
    location = base.removeprefix("chroma://")
    if location == base or not location:
        raise InvalidInputError(f"expected chroma:///path or chroma://relative/path, got {url!r}")
    return location, params


def server_address(url: str) -> tuple[ServerAddress, dict[str, str]]:
    """The server and parameters of ``chroma+http(s)://host[:port][/]``."""
    base, params = split_query(
        url, frozenset({"collection", "dimension", "ef_search", "tenant", "database", "exclusive"})
    )
    parts = urlsplit(base)
    if (
        parts.scheme not in ("chroma+http", "chroma+https")
        or not parts.hostname
        or parts.path not in ("", "/")
    ):
        raise InvalidInputError(f"expected chroma+http://host:port or chroma+https://host:port, got {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise InvalidInputError(f"invalid port in {url!r}") from None
    ssl = parts.scheme == "chroma+https"
    address = ServerAddress(
        host=parts.hostname,
        port=port if port is not None else (443 if ssl else DEFAULT_PORT),
        ssl=ssl,
        tenant=params.get("tenant", DEFAULT_TENANT),
        database=params.get("database", DEFAULT_DATABASE),
    )
    return address, params
