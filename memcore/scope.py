"""Who a record belongs to: tenant, user, agent and session.

A :class:`Scope` is a separate, mandatory argument of every store call. A read
with scope ``q`` matches a record with scope ``r`` when every field set in ``q``
equals the same field of ``r``; fields left unset in ``q`` match anything. So
``Scope(tenant="acme")`` reads every user's records of that tenant, and
``Scope(tenant="acme", user_id="u1", session_id="s9")`` one session of one user.

An empty scope would match everything, which is how a tenant leak starts; it is
refused. Admin tools that really mean "everything" say so with
:meth:`Scope.everything`.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import ClassVar

import pydantic

from memcore.errors import InvalidInputError, ScopeError
from memcore.model_base import MemcoreModel, is_stored

SCOPE_FIELDS: tuple[str, ...] = ("tenant", "user_id", "agent_id", "session_id")
"""The scope fields, most significant first."""

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

    :param tenant: the organisation or deployment.
    :param user_id: the end user.
    :param agent_id: the agent that wrote or reads the memory.
    :param session_id: one conversation.
    :raises ScopeError: if every field is unset or a value is not allowed.
    """

    invalid_error: ClassVar[type[InvalidInputError]] = ScopeError

    tenant: str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    # One model validator rather than one per field: a scope is decoded with every record read.
    @pydantic.model_validator(mode="after")
    def _check_values(self, info: pydantic.ValidationInfo) -> Scope:
        if is_stored(info):
            return self
        values = [value for name in SCOPE_FIELDS if (value := getattr(self, name)) is not None]
        if not values:
            raise ScopeError(
                "a scope needs at least one of tenant, user_id, agent_id, session_id; "
                "admin tools that mean every record use Scope.everything()"
            )
        for value in values:
            validate_scope_value(value)
        return self

    @classmethod
    def everything(cls) -> Scope:
        """The admin scope that matches every record. Never valid on a record."""
        return _EVERYTHING

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
        return all(getattr(record_scope, name) == value for name, value in self.items())

    def digest(self) -> str:
        """A stable hex digest of all four fields, for folder and key names."""
        canonical = json.dumps(self.as_tuple(), separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def __str__(self) -> str:
        return ",".join(f"{name}={value}" for name, value in self.items()) or "<everything>"


class _Everything(Scope):
    """The type of the admin scope: a type rather than a private attribute, which pydantic would
    initialise on every scope (every record read), and which copies and pickles keep."""

    def __repr__(self) -> str:
        return "Scope.everything()"


_EVERYTHING = _Everything.model_construct(tenant=None, user_id=None, agent_id=None, session_id=None)
