"""GenAI memory spans for memory calls (``search_memory``, ``create_memory``, ...)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memcore.telemetry.stores import db_system
from memcore.telemetry.tracing import (
    F,
    Opened,
    capturing_content,
    current_span,
    in_memory_call,
    instrumented,
    start_span,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer


def memory_operation(operation: str) -> Callable[[F], F]:
    """Give a memory method (sync or async) a GenAI memory span named ``operation``
    (``search_memory``, ...), unless it runs inside another call of the same memory
    (``get_context`` calls ``retrieve``; an async twin's span covers the embedding done on the
    loop and the sync logic on the store's workers, whose own span it replaces)."""

    def decorate(method: F) -> F:
        name = method.__name__

        def opener(
            tracer: Tracer, memory: object, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Opened | None:
            if in_memory_call.get() is memory:
                return None
            span, token = start_span(tracer, operation, "INTERNAL", None)
            if span.is_recording():
                with contextlib.suppress(Exception):  # a description never fails the call
                    _describe_memory(span, memory, operation, name)
            inside = in_memory_call.set(memory)
            return Opened(
                span, token, lambda span, result: _describe_memory_result(span, name, args, result), inside
            )

        return instrumented(method, opener)

    return decorate


def _describe_memory(span: Span, memory: object, operation: str, method: str) -> None:
    span.set_attribute("gen_ai.operation.name", operation)
    span.set_attribute("memcore.memory.method", method)
    span.set_attribute("memcore.memory.class", type(memory).__name__)
    scope = getattr(memory, "scope", None)
    agent_id, session_id = getattr(scope, "agent_id", None), getattr(scope, "session_id", None)
    if isinstance(agent_id, str):
        span.set_attribute("gen_ai.agent.id", agent_id)
    if isinstance(session_id, str):
        span.set_attribute("gen_ai.conversation.id", session_id)
    if capturing_content():
        for field in ("tenant", "user_id"):
            value = getattr(scope, field, None)
            if isinstance(value, str):
                span.set_attribute(f"memcore.scope.{field}", value)
    mode = getattr(getattr(memory, "recall_block", None), "mode", None)
    if isinstance(mode, str):
        span.set_attribute("memcore.recall.mode", mode)
    store = getattr(memory, "store", None)
    if store is not None:
        span.set_attribute("db.system.name", db_system(store))


def _describe_memory_result(span: Span, method: str, args: tuple[Any, ...], result: object) -> None:
    count: int | None = None
    if result is None and args and isinstance(args[0], (list, tuple)):  # write_records
        count = len(args[0])
    if method.endswith("get_context") and isinstance(result, tuple) and len(result) == 2:
        messages, tokens = result
        count = len(messages) if isinstance(messages, list) else None
        if isinstance(tokens, int):
            span.set_attribute("memcore.context.tokens", tokens)
    elif isinstance(result, list):
        count = len(result)
        note_records(result)
    elif isinstance(result, int) and not isinstance(result, bool):
        count = result
    elif result is not None and hasattr(result, "id"):
        count = 1
        span.set_attribute("gen_ai.memory.record.id", str(result.id))
        note_records([result])
    if count is not None:
        span.set_attribute("gen_ai.memory.record.count", count)


def note_query(query: str | None) -> None:
    """Put the query a memory recalls with on the current span, when capturing content
    (``gen_ai.memory.query.text``)."""
    if query is None or not capturing_content():
        return
    span = current_span()
    if span is not None:
        span.set_attribute("gen_ai.memory.query.text", query)


def note_records(records: Sequence[object]) -> None:
    """Put records (``MemoryRecord`` or ``ContextRecord``) on the current span as the GenAI
    conventions' ``gen_ai.memory.records`` JSON, when capturing content."""
    if not capturing_content():
        return
    span = current_span()
    if span is None:
        return
    entries = []
    for item in records:
        record = getattr(item, "record", item)
        message = getattr(record, "message", None)
        if message is None:
            continue
        entry: dict[str, Any] = {
            "id": str(getattr(record, "id", "")),
            "content": message.content,
            "metadata": {"role": message.role, "kind": getattr(record, "kind", None)},
        }
        score = getattr(item, "score", None)
        if isinstance(score, float):
            entry["score"] = score
        source = getattr(item, "source", None)
        if isinstance(source, str):
            entry["metadata"]["source"] = source
        entries.append(entry)
    span.set_attribute("gen_ai.memory.records", json.dumps(entries, ensure_ascii=False))
