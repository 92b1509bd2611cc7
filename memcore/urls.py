"""Store URLs: parsed once, into one type, with one convention for every store.

============================================  ===============================================
``scheme://``                                  a store in this process's memory
``scheme:///abs/path``, ``scheme://rel/path``  a store in a folder (``~`` expands)
``scheme://host[:port]``                       a server (IPv6 hosts in brackets)
``?collection=name``                           the collection (or table) within the location
``?dimension=384``                             fix the vector dimension up front
============================================  ===============================================

Each store names the parameters it takes; anything else in a URL (an unknown or repeated
parameter, a fragment, a port out of range, credentials where a store takes none) raises
:class:`~memcore.errors.InvalidInputError` before anything is opened or connected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import SplitResult, parse_qsl, urlsplit

from memcore.errors import InvalidInputError

COLLECTION = "collection"
DIMENSION = "dimension"
_MAX_INT_DIGITS = 18


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL.

    :param scheme: the scheme, lowercased (``jsonl``, ``qdrant+http``).
    :param netloc: what stands between ``//`` and the path (host, port, credentials).
    :param path: the path after the netloc (``/abs/path``, ``/``, or empty).
    :param params: the query parameters (each given once).
    :param text: the URL as given, for messages.
    """

    scheme: str
    netloc: str
    path: str
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    text: str = ""

    @classmethod
    def parse(cls, url: str, *, params: Iterable[str] = (), other_params: bool = False) -> StoreURL:
        """Parse ``url``, allowing the query parameters ``params``.

        :param other_params: keep parameters not in ``params`` too (a store that passes them on,
            as PostgreSQL's to libpq), instead of refusing them.
        :raises InvalidInputError: for a URL that is not ``scheme://...``, a fragment, or an
            unknown or repeated parameter.
        """
        if not isinstance(url, str) or "://" not in url:
            raise InvalidInputError(f"a store URL looks like scheme://location, got {url!r}")
        if "\x00" in url:
            raise InvalidInputError("a store URL cannot contain a NUL byte")
        try:
            parts: SplitResult = urlsplit(url)
            pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        except ValueError as exc:  # an unclosed IPv6 bracket, a malformed query
            raise InvalidInputError(f"invalid store URL {_shown(url)}: {exc}") from None
        if parts.fragment:
            raise InvalidInputError(f"a store URL has no #fragment: {_shown(url)}")
        allowed = frozenset(params)
        found = dict(pairs)
        unknown = sorted(name for name in found if name not in allowed and not other_params)
        if unknown or len(found) != len(pairs):
            raise InvalidInputError(
                f"{_shown(url)}: unknown or repeated parameters {unknown or sorted(found)}; "
                f"this store takes {', '.join(sorted(allowed)) or 'none'}"
            )
        return cls(parts.scheme.lower(), parts.netloc, parts.path, MappingProxyType(found), url)

    def location(self) -> str:
        """The folder of a file store: ``/abs/path`` or ``rel/path`` (``~`` not yet expanded).

        :raises InvalidInputError: if the URL names none.
        """
        location = self.netloc + self.path
        if not location:
            raise InvalidInputError(
                f"expected {self.scheme}:///abs/path or {self.scheme}://rel/path, got {_shown(self.text)}"
            )
        return location

    def require_empty_location(self) -> None:
        """Refuse a location where the store takes none (``memory://``)."""
        if self.netloc or self.path.strip("/"):
            raise InvalidInputError(
                f"the {self.scheme} store takes no location: {self.scheme}://, got {_shown(self.text)}"
            )

    def server(self, default_port: int, *, secret_hint: str) -> tuple[str, int]:
        """The host (IPv6 in brackets) and port of a server URL, which carries no credentials.

        :param secret_hint: where the store takes its secret instead, for the error message.
        :raises InvalidInputError: for no host, a bad port, a path, or ``user:password@``.
        """
        parts = urlsplit(f"//{self.netloc}")
        if parts.username is not None or parts.password is not None:
            raise InvalidInputError(  # the URL itself is not echoed: it holds a password
                f"a {self.scheme} URL cannot carry credentials (user:password@); {secret_hint} instead"
            )
        if not parts.hostname:
            raise InvalidInputError(f"expected {self.scheme}://host[:port], got {_shown(self.text)}")
        if self.path.strip("/"):
            raise InvalidInputError(
                f"{_shown(self.text)}: a server URL has no path; name the collection with ?{COLLECTION}=name"
            )
        try:
            port = parts.port
        except ValueError as exc:  # out of range, or not a number
            raise InvalidInputError(f"invalid port in {_shown(self.text)}: {exc}") from None
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return host, default_port if port is None else port

    def text_param(self, name: str, default: str) -> str:
        """The parameter ``name``, or ``default``; an empty value is refused."""
        value = self.params.get(name, default)
        if not value:
            raise InvalidInputError(f"{name} cannot be empty in {_shown(self.text)}")
        return value

    def positive_int(self, name: str) -> int | None:
        """The parameter ``name`` as a positive integer, or ``None`` when absent.

        :raises InvalidInputError: for anything but ASCII digits of a positive value.
        """
        value = self.params.get(name)
        if value is None:
            return None
        # isascii: str.isdigit accepts "²"; the length keeps int() off huge digit strings.
        number = int(value) if value.isascii() and value.isdigit() and len(value) <= _MAX_INT_DIGITS else 0
        if number < 1:
            raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
        return number

    def flag(self, name: str) -> bool:
        """The parameter ``name`` as a boolean (``true``/``1``, ``false``/``0``; false when absent)."""
        value = self.params.get(name, "false")
        if value not in ("true", "1", "false", "0"):
            raise InvalidInputError(f"{name} must be 'true' or 'false', got {value!r}")
        return value in ("true", "1")


def _shown(url: str) -> str:
    """``url`` for a message: any password replaced, and bounded in length."""
    hidden = _PASSWORD.sub(r"\1***@", url)
    return repr(hidden if len(hidden) <= 200 else hidden[:200] + "...")


_PASSWORD = re.compile(r"(//[^/@:?#]*:)[^/@?#]*@")
