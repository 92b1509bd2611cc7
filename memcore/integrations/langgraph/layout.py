"""How LangGraph items are laid out as memcore records, and how records are read back as items.

An item ``(namespace, key) -> value`` of a deployment is one record of kind :data:`ITEM_KIND`:

* its scope: the deployment's scope, plus the leading namespace labels that the deployment maps
  onto scope fields (``namespace_scope=("user_id",)``: ``("alice", "memories")`` lives in
  ``Scope(tenant=..., user_id="alice")``), exactly;
* its id: a UUID derived from that scope, the deployment's ``namespace_scope``, the namespace
  and the key (:meth:`Layout.record_id`), so a ``put`` replaces the item in place, and two
  writers of one new item write one record;
* its message content: the value as JSON;
* its metadata: the namespace one label per key (``lg_ns0``, ``lg_ns1``, ...), ``lg_depth``,
  ``lg_key``, ``lg_map`` (the deployment's ``namespace_scope``, comma-separated), ``lg_created``
  (when the item was first put), ``lg_ttl`` (minutes, when it has one) and the string copies of
  :mod:`memcore.integrations.langgraph.filters`.

A record is read back as an item only if all of that holds: its kind, its metadata, its scope
(what its namespace maps to), its mapping (so two deployments that lay one scope out
differently never read, replace or delete each other's items) and its id (derived from them).
Anything else in the scopes read (another memory's turns, a record another writer dressed up
as an item) is not an item, and is never replaced or deleted through LangGraph.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import InvalidNamespaceError, Item

from memcore.errors import InvalidInputError, ScopeError
from memcore.filters import FilterSpec
from memcore.records import MemoryRecord, Message, MetadataValue, utc_now
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.validation import check_scope

ITEM_KIND = "langgraph"
"""The ``kind`` of the records that hold LangGraph items."""
MAX_NAMESPACE_DEPTH = 16
"""The most labels a namespace may have (one metadata key each)."""
LABEL_PREFIX = "lg_ns"
DEPTH_KEY = "lg_depth"
ITEM_KEY = "lg_key"
CREATED_KEY = "lg_created"
TTL_KEY = "lg_ttl"
MAP_KEY = "lg_map"
_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "https://memcore.dev/integrations/langgraph")
_MAPPABLE = SCOPE_FIELDS[1:]
_MAX_VALUE_NESTING = 500  # json encodes recursively: deeper values would overflow its stack


class NamespaceError(InvalidInputError, InvalidNamespaceError):
    """A namespace LangGraph or memcore refuses: empty, a label that is empty, not a string, or
    holds ``.`` or NUL, the root label ``"langgraph"``, or more than :data:`MAX_NAMESPACE_DEPTH`
    labels. Both a memcore :class:`~memcore.errors.InvalidInputError` and LangGraph's
    ``InvalidNamespaceError``."""


def check_labels(namespace: object) -> tuple[str, ...]:
    """``namespace`` as a tuple of labels, each a non-empty string without ``.`` or NUL.

    :raises NamespaceError: otherwise.
    """
    if not isinstance(namespace, (tuple, list)):
        raise NamespaceError(f"a namespace is a tuple of strings, got {type(namespace).__name__}")
    for label in namespace:
        if not isinstance(label, str):
            raise NamespaceError(f"namespace labels are strings, got {label!r} in {namespace!r}")
        if not label or "." in label or "\x00" in label:
            raise NamespaceError(
                f"invalid namespace label {label!r} in {namespace!r}: "
                "labels are non-empty, without '.' or NUL"
            )
        _check_text(label, "a namespace label")
    return tuple(namespace)


def check_item_namespace(namespace: object) -> tuple[str, ...]:
    """A namespace an item may be put in (:func:`check_labels`, non-empty, not rooted at
    ``"langgraph"``, at most :data:`MAX_NAMESPACE_DEPTH` labels)."""
    labels = check_labels(namespace)
    if not labels:
        raise NamespaceError("an item's namespace cannot be empty")
    if labels[0] == "langgraph":
        raise NamespaceError(f'the root label of a namespace cannot be "langgraph": {labels!r}')
    if len(labels) > MAX_NAMESPACE_DEPTH:
        raise NamespaceError(f"a namespace has at most {MAX_NAMESPACE_DEPTH} labels, got {len(labels)}")
    return labels


def check_key(key: object) -> str:
    """An item key: any string of valid Unicode."""
    if not isinstance(key, str):
        raise InvalidInputError(f"an item key is a string, got {type(key).__name__}")
    return _check_text(key, "an item key")


def _check_text(text: str, what: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} must be valid Unicode text, got {text!r}") from None
    return text


def encode_value(value: object) -> tuple[dict[str, Any], str]:
    """The value as a plain dict and as the JSON text stored.

    :raises InvalidInputError: for a value that is not a mapping, or holds something other than
        JSON (dicts with string keys, lists, tuples, strings, numbers, booleans, ``None``).
    """
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"an item value is a mapping, got {type(value).__name__}")
    plain = dict(value)
    pending: list[tuple[object, int]] = [(plain, 0)]
    while pending:
        part, depth = pending.pop()
        if depth > _MAX_VALUE_NESTING:
            raise InvalidInputError(f"an item value may nest at most {_MAX_VALUE_NESTING} levels")
        if isinstance(part, dict):
            for key, inner in part.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"item values are JSON: keys are strings, got {key!r}")
                pending.append((inner, depth + 1))
        elif isinstance(part, (list, tuple)):
            pending.extend((inner, depth + 1) for inner in part)
        elif not isinstance(part, (str, int, float, bool)) and part is not None:
            raise InvalidInputError(f"item values are JSON, got a {type(part).__name__}: {part!r}"[:300])
    try:
        text = json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"the item value is not JSON: {exc}") from None
    return plain, _check_text(text, "an item value")


class Layout:
    """Where a deployment's items live: its scope, and which namespace labels are scope fields.

    :param deployment: the deployment's scope (names a tenant; not ``Scope.everything()``).
    :param namespace_scope: the scope fields the leading namespace labels fill, in order
        (``("user_id",)``, ``("user_id", "session_id")``); fields the deployment leaves unset.
    :raises ScopeError: for a scope or mapping that is not allowed.
    """

    def __init__(self, deployment: Scope, namespace_scope: Sequence[str] = ()) -> None:
        deployment = check_scope(deployment)
        if deployment.is_everything or deployment.tenant is None:
            raise ScopeError("a LangGraph store is bound to a scope that names a tenant")
        mapping = tuple(namespace_scope)
        for name in mapping:
            if name not in _MAPPABLE:
                raise ScopeError(f"namespace_scope names scope fields {_MAPPABLE}, got {name!r}")
            if getattr(deployment, name) is not None:
                raise ScopeError(f"namespace_scope maps {name!r}, which the scope {deployment} already sets")
        if len(set(mapping)) != len(mapping):
            raise ScopeError(f"namespace_scope names a field twice: {mapping}")
        self.deployment = Scope(**dict(deployment.items()))
        self.mapping = mapping
        self.marker = ",".join(("namespace_scope", *mapping))
        """The value of ``lg_map`` on this layout's items."""

    # -- scopes and ids ---------------------------------------------------------------------

    def scope_of(self, namespace: tuple[str, ...]) -> Scope:
        """The exact scope an item of ``namespace`` lives in.

        :raises ScopeError: if a label mapped onto a scope field is not a valid scope value.
        """
        mapped = dict(zip(self.mapping, namespace, strict=False))
        if not mapped:
            return self.deployment
        try:
            return Scope(**dict(self.deployment.items()), **mapped)
        except ScopeError as exc:
            raise ScopeError(f"namespace {namespace!r} maps onto the scope: {exc}") from None

    def item_scope(self, namespace: tuple[str, ...]) -> Scope | None:
        """The exact scope of an item of ``namespace`` (to get or delete it by id), or ``None``
        where no item can be (an empty or too deep namespace, a mapped label no scope takes)."""
        if not namespace or len(namespace) > MAX_NAMESPACE_DEPTH:
            return None
        try:
            return self.scope_of(namespace).exact()
        except ScopeError:
            return None

    def read_scope(self, fixed: tuple[str, ...]) -> Scope | None:
        """The scope to read for items whose namespace starts with ``fixed``: exact when ``fixed``
        sets every mapped field, else the scope of what it sets (and the check of each record
        keeps only items). ``None`` when a mapped label is no scope value: no item lies there."""
        try:
            scope = self.scope_of(fixed[: len(self.mapping)])
        except ScopeError:
            return None
        return scope.exact() if len(fixed) >= len(self.mapping) else scope

    def record_id(self, scope: Scope, namespace: tuple[str, ...], key: str) -> uuid.UUID:
        """The id of the record of item ``(namespace, key)`` in the exact ``scope``."""
        canonical = json.dumps(
            [scope.as_tuple(), self.mapping, namespace, key], ensure_ascii=False, separators=(",", ":")
        )
        return uuid.uuid5(_IDS, canonical)

    # -- records ----------------------------------------------------------------------------

    def record(
        self,
        namespace: tuple[str, ...],
        key: str,
        text: str,
        created: datetime | None,
        ttl_minutes: float | None,
        extra: Mapping[str, MetadataValue],
        expires_at: datetime | None = None,
    ) -> MemoryRecord:
        """The record of an item (``text``: its JSON value; ``created``: when first put, if kept;
        ``expires_at``: when the store's clock says ``ttl_minutes`` end)."""
        scope = self.scope_of(namespace)
        metadata: dict[str, MetadataValue] = {
            f"{LABEL_PREFIX}{i}": label for i, label in enumerate(namespace)
        }
        metadata.update({DEPTH_KEY: len(namespace), ITEM_KEY: key, MAP_KEY: self.marker, **extra})
        if ttl_minutes is not None:
            metadata[TTL_KEY] = float(ttl_minutes)
        now = utc_now()
        metadata[CREATED_KEY] = (created or now).isoformat()
        return MemoryRecord(
            id=self.record_id(scope, namespace, key),
            scope=scope,
            message=Message(role="user", content=text),
            created_at=now,
            metadata=metadata,
            kind=ITEM_KIND,
            expires_at=expires_at,
        )

    def namespace_of(self, record: MemoryRecord) -> tuple[tuple[str, ...], str] | None:
        """The namespace and key of a record that is one of this deployment's items, else ``None``."""
        meta = record.metadata
        depth, key = meta.get(DEPTH_KEY), meta.get(ITEM_KEY)
        if record.kind != ITEM_KIND or not isinstance(key, str) or isinstance(depth, bool):
            return None
        if meta.get(MAP_KEY) != self.marker:
            return None
        if not isinstance(depth, int) or not 1 <= depth <= MAX_NAMESPACE_DEPTH:
            return None
        labels = [meta.get(f"{LABEL_PREFIX}{i}") for i in range(depth)]
        if not all(isinstance(label, str) and label for label in labels):
            return None
        namespace = tuple(str(label) for label in labels)
        try:
            scope = self.scope_of(namespace)
        except ScopeError:
            return None
        if record.scope.as_tuple() != scope.as_tuple() or record.id != self.record_id(scope, namespace, key):
            return None
        return namespace, key

    def item(self, record: MemoryRecord) -> Item | None:
        """The item a record holds, or ``None`` if it holds none of this deployment's."""
        found = self.namespace_of(record)
        if found is None:
            return None
        try:
            value = json.loads(record.message.content)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        return Item(
            value=value,
            key=found[1],
            namespace=found[0],
            created_at=_created(record),
            updated_at=record.created_at,
        )

    @staticmethod
    def ttl_minutes(record: MemoryRecord) -> float | None:
        """The item's time to live in minutes, if it has one."""
        ttl = record.metadata.get(TTL_KEY)
        return float(ttl) if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) else None

    # -- filters ----------------------------------------------------------------------------

    def prefix_clauses(self, prefix: Sequence[str], *, wildcards: bool = False) -> list[FilterSpec]:
        """This layout's items whose namespace starts with ``prefix``: literally (a search's
        ``namespace_prefix``), or with ``"*"`` labels matching any label (``wildcards``: a
        ``list_namespaces`` condition)."""
        clauses: list[FilterSpec] = [{"kind": ITEM_KIND}, {f"metadata.{MAP_KEY}": self.marker}]
        clauses += [
            {f"metadata.{LABEL_PREFIX}{i}": label}
            for i, label in enumerate(prefix)
            if not (wildcards and label == "*")
        ]
        if prefix:
            clauses.append({f"metadata.{DEPTH_KEY}": {"$gte": len(prefix)}})
        return clauses

    @staticmethod
    def suffix_clauses(suffix: Sequence[str]) -> list[FilterSpec]:
        """Items whose namespace ends with ``suffix`` (``"*"`` labels match any label)."""
        if not suffix:
            return []
        if len(suffix) > MAX_NAMESPACE_DEPTH:
            return [{f"metadata.{DEPTH_KEY}": {"$gt": MAX_NAMESPACE_DEPTH}}]  # no item is that deep
        if all(label == "*" for label in suffix):
            return [{f"metadata.{DEPTH_KEY}": {"$gte": len(suffix)}}]
        per_depth: list[FilterSpec] = []
        for depth in range(len(suffix), MAX_NAMESPACE_DEPTH + 1):
            start = depth - len(suffix)
            labels: list[FilterSpec] = [
                {f"metadata.{LABEL_PREFIX}{start + i}": label}
                for i, label in enumerate(suffix)
                if label != "*"
            ]
            per_depth.append({"$and": [{f"metadata.{DEPTH_KEY}": depth}, *labels]})
        return [{"$or": per_depth}]


def _created(record: MemoryRecord) -> datetime:
    stamp = record.metadata.get(CREATED_KEY)
    if isinstance(stamp, str):
        try:
            created = datetime.fromisoformat(stamp)
        except ValueError:
            return record.created_at
        if created.tzinfo is not None:
            return created
    return record.created_at
