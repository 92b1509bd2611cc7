"""Database client spans for store operations: ``{db.operation.name} {db.system.name}``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memcore.telemetry.tracing import F, Opened, capturing_content, instrumented, start_span, store_spans_off

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

_store_names: dict[tuple[type, str], tuple[str, dict[str, str]]] = {}


def db_system(store: object) -> str:
    """The store's ``db.system.name``: its class's ``db_system_name``, else ``memcore.<name>``."""
    system = getattr(type(store), "db_system_name", None)
    if isinstance(system, str):
        return system
    return f"memcore.{getattr(type(store), 'name', type(store).__name__)}"


def _store_span_name(store: object, operation: str) -> tuple[str, dict[str, str]]:
    key = (type(store), operation)
    found = _store_names.get(key)
    if found is None:
        system = db_system(store)
        found = _store_names[key] = (
            f"{operation} {system}",
            {"db.system.name": system, "db.operation.name": operation},
        )
    return found


def store_operation(operation: str) -> Callable[[F], F]:
    """Give a store method (sync, or its async twin: the span is current while its work runs on
    the store's workers, which copy the caller's context) a database client span named
    ``{operation} {db.system.name}``."""

    def opener(tracer: Tracer, store: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Opened | None:
        if store_spans_off.get():
            return None
        name, attributes = _store_span_name(store, operation)
        span, token = start_span(tracer, name, "CLIENT", attributes)
        return Opened(
            span, token, lambda span, result: _describe_store_call(span, operation, args, kwargs, result)
        )

    return lambda method: instrumented(method, opener)


_SCOPE_FIELDS = ("tenant", "user_id", "agent_id", "session_id")
_PRIVATE_SCOPE_FIELDS = frozenset({"tenant", "user_id"})


def _describe_scope(span: Span, scope: object) -> None:
    """The scope's depth and exactness; its ids where they are not personal (agent, session), and
    all of them when capturing content."""
    values = [getattr(scope, field, None) for field in _SCOPE_FIELDS]
    if not all(value is None or isinstance(value, str) for value in values):
        return
    depth = max((i + 1 for i, value in enumerate(values) if value is not None), default=0)
    span.set_attribute("memcore.scope.depth", depth)
    span.set_attribute("memcore.scope.exact", bool(getattr(scope, "is_exact", False)))
    for field, value in zip(_SCOPE_FIELDS, values, strict=True):
        if value is not None and (capturing_content() or field not in _PRIVATE_SCOPE_FIELDS):
            span.set_attribute(f"memcore.scope.{field}", value)


def _describe_store_call(
    span: Span, operation: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], result: object
) -> None:
    if operation not in ("add", "sweep", "purge") and args:
        _describe_scope(span, args[0])
    if operation == "add":
        records = args[0] if args else kwargs.get("records")
        if isinstance(records, (list, tuple)):
            span.set_attribute("memcore.store.records", len(records))
    elif operation == "search":
        _describe_search(span, kwargs)
    elif operation in ("get", "vectors", "delete", "refresh"):
        ids = args[1] if len(args) > 1 else kwargs.get("ids")
        if isinstance(ids, (list, tuple)):
            span.set_attribute("memcore.store.ids", len(ids))
    if isinstance(result, (list, dict)):
        span.set_attribute("db.response.returned_rows", len(result))
    elif operation == "count" and isinstance(result, int):
        span.set_attribute("memcore.store.count", result)
    elif isinstance(result, int) and not isinstance(result, bool):
        span.set_attribute("memcore.store.affected", result)


def _describe_search(span: Span, kwargs: Mapping[str, Any]) -> None:
    if kwargs.get("keywords") is not None:
        kind, query = "keywords", kwargs.get("keywords")
    else:
        given = [part for part in ("vector", "text") if kwargs.get(part) is not None]
        kind, query = "+".join(given) or "none", kwargs.get("text")
    span.set_attribute("memcore.search.kind", kind)
    limit = kwargs.get("limit")
    if isinstance(limit, int):
        span.set_attribute("memcore.search.limit", limit)
    span.set_attribute("memcore.search.filtered", kwargs.get("filter") is not None)
    if capturing_content() and isinstance(query, str):
        span.set_attribute("db.query.text", query)
