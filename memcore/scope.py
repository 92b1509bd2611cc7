"""Who a record belongs to: tenant, user, agent and session.

A :class:`Scope` is a separate, mandatory argument of every store call. A read
with scope ``q`` matches a record with scope ``r`` when every field set in ``q``
equals the same field of ``r``; fields left unset in ``q`` match anything. So
``Scope(tenant="acme")`` reads every user's records of that tenant, and
``Scope(tenant="acme", user_id="u1", session_id="s9")`` one session of one user.
:meth:`Scope.exact` reads one level only: ``Scope(tenant="acme",
user_id="u1").exact()`` matches the user's own records, not those of the user's
agents or sessions. Memories read and clear their own records that way.

Every scope names a tenant, so no read crosses tenants: a single-tenant app
leaves ``tenant`` unset and gets :data:`DEFAULT_TENANT`. A scope must still name
at least one field (``Scope()`` is refused: a user id that came out empty must
not read the whole tenant). Admin tools that really mean "everything" say so
with :meth:`Scope.everything`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import ClassVar
from uuid import UUID, uuid5

import pydantic

from memcore.errors import InvalidInputError, ScopeError
from memcore.model_base import MemcoreModel, is_stored

SCOPE_FIELDS: tuple[str, ...] = ("tenant", "user_id", "agent_id", "session_id")
"""The scope fields, most significant first."""

DEFAULT_TENANT = "default"
"""The tenant of a scope that names none."""

_VALUE_PATTERN = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


def validate_scope_value(value: str) -> str:
    """Check one scope value and return it unchanged.

    :param value: a tenant, user, agent or session identifier.
    :raises ScopeError: if it is not 1-128 characters of ``[A-Za-z0-9._:@-]``, or
        made only of dots (``.``, ``..``), which file-backed stores could take for
        a path.
    """
    if not isinstance(value, str):
        raise ScopeError(f"scope values are strings, got {type(value).__name__}")
    if not _VALUE_PATTERN.fullmatch(value):
        raise ScopeError(f"invalid scope value {value!r}: use 1-128 characters of letters, digits and ._:@-")
    if set(value) == {"."}:
        raise ScopeError(f"invalid scope value {value!r}: path-like values are not allowed")
    return value


class Scope(MemcoreModel):
    """The owner of a record, and the filter ANDed into every read and delete.

    :param tenant: the organisation or deployment; :data:`DEFAULT_TENANT` when not given.
    :param user_id: the end user.
    :param agent_id: the agent that wrote or reads the memory.
    :param session_id: one conversation.
    :raises ScopeError: if no field is given, the tenant is ``None``, or a value is not allowed.
    """

    invalid_error: ClassVar[type[InvalidInputError]] = ScopeError

    # None only in records stored before every scope had a tenant; a new scope always has one.
    tenant: str | None = DEFAULT_TENANT
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    # One model validator rather than one per field: a scope is decoded with every record read.
    @pydantic.model_validator(mode="after")
    def _check_values(self, info: pydantic.ValidationInfo) -> Scope:
        if is_stored(info):
            return self
        if not self.model_fields_set:
            raise ScopeError(
                "a scope needs at least one of tenant, user_id, agent_id, session_id; "
                "admin tools that mean every record use Scope.everything()"
            )
        if self.tenant is None:
            raise ScopeError(
                "every scope names a tenant, so that no read crosses tenants; leave it unset for "
                f"{DEFAULT_TENANT!r}, and use Scope.everything() in admin tools"
            )
        for name in SCOPE_FIELDS:
            if (value := getattr(self, name)) is not None:
                validate_scope_value(value)
        return self

    @classmethod
    def everything(cls) -> Scope:
        """The admin scope that matches every record. Never valid on a record."""
        return _EVERYTHING

    def exact(self) -> Scope:
        """This scope, matching only records whose scope equals it field for field.

        Unset fields must be unset on the record too: ``Scope(tenant="t",
        user_id="u").exact()`` sees the user's own records, not those an agent or a
        session of that user wrote. Stores filter on it natively, like any scope.

        :raises ScopeError: for :meth:`everything`, which has no level of its own.
        """
        if self.is_everything:
            raise ScopeError("Scope.everything() has no exact form")
        return _Exact.model_construct(**{name: getattr(self, name) for name in SCOPE_FIELDS})

    @property
    def is_exact(self) -> bool:
        """Whether this scope came from :meth:`exact` (or is a copy of one)."""
        return isinstance(self, _Exact)

    @property
    def is_admin(self) -> bool:
        """Whether this is the scope :meth:`everything` returns, or a copy of it (pickled, copied).

        Not an empty scope made otherwise (``model_construct()``), which stores refuse.
        """
        return isinstance(self, _Everything)

    @property
    def is_everything(self) -> bool:
        """Whether no field is set, so the scope matches every record."""
        return all(getattr(self, name) is None for name in SCOPE_FIELDS)

    def items(self) -> list[tuple[str, str]]:
        """The set fields as ``(name, value)`` pairs, in :data:`SCOPE_FIELDS` order."""
        return [(name, value) for name in SCOPE_FIELDS if (value := getattr(self, name)) is not None]

    def as_tuple(self) -> tuple[str | None, str | None, str | None, str | None]:
        """All four fields, unset ones as ``None``; a hashable key."""
        return (self.tenant, self.user_id, self.agent_id, self.session_id)

    def matches(self, record_scope: Scope) -> bool:
        """Whether a record with ``record_scope`` is visible through this scope."""
        if self.is_exact:
            return record_scope.as_tuple() == self.as_tuple()
        return all(getattr(record_scope, name) == value for name, value in self.items())

    def digest(self) -> str:
        """A stable hex digest of all four fields, for folder and key names."""
        return _named(self.as_tuple())[0]

    def __str__(self) -> str:
        text = ",".join(f"{name}={value}" for name, value in self.items()) or "<everything>"
        return f"{text} (exact)" if self.is_exact else text


class _Exact(Scope):
    """The type of the scopes :meth:`Scope.exact` makes (a type, so that copies and pickles keep it)."""

    def __repr__(self) -> str:
        return f"{Scope(**dict(self.items()))!r}.exact()"


class _Everything(Scope):
    """The type of the admin scope: a type rather than a private attribute, which pydantic would
    initialise on every scope (every record read), and which copies and pickles keep."""

    def __repr__(self) -> str:
        return "Scope.everything()"


_EVERYTHING = _Everything.model_construct(tenant=None, user_id=None, agent_id=None, session_id=None)


def scope_order(scope: Scope) -> tuple[tuple[bool, str], ...]:
    """A sort key for scopes: field by field in :data:`SCOPE_FIELDS` order, unset first."""
    return tuple((value is not None, value or "") for value in scope.as_tuple())


def storage_id(scope: Scope, record_id: UUID) -> UUID:
    """One UUID naming a record's identity, its exact scope plus its id.

    For backends whose primary key is a single id: the key of a record, so that the
    same id in two scopes names two rows, and no scope can reach another's row by
    guessing its id. Deterministic (a UUID5 under the scope's :meth:`Scope.digest`).
    """
    return uuid5(_named(scope.as_tuple())[1], str(record_id))


def _named(values: tuple[str | None, ...]) -> tuple[str, UUID]:
    """The :meth:`Scope.digest` of a scope with these four values, and that digest as a UUID.

    Remembered for values that are all plain strings (or unset): stores name every record they
    decode by its scope (~5 us a digest), and an agent's records share a few scopes. A value that
    is not a ``str`` (a scope made with ``model_construct``) is digested each time: it could merely
    compare equal to, and hash like, a remembered string.
    """
    plain = all(value is None or type(value) is str for value in values)
    found = _NAMES.get(values) if plain else None
    if found is None:
        canonical = json.dumps(values, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:32]
        found = (digest, UUID(digest))
        if plain:
            if len(_NAMES) >= _NAMES_KEPT:
                _NAMES.clear()
            _NAMES[values] = found
    return found


_NAMES: dict[tuple[str | None, ...], tuple[str, UUID]] = {}
_NAMES_KEPT = 4_096
