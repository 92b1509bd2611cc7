"""GenAI embeddings spans, and the context a batching worker runs a shared model call in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from memcore.telemetry.tracing import NULL_CONTEXT, F, Opened, active_tracer, instrumented, start_span

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer


def _describe_embedding(span: Span, embedder: object, texts: object) -> None:
    span.set_attribute("gen_ai.operation.name", "embeddings")
    span.set_attribute("gen_ai.provider.name", "memcore")
    span.set_attribute("gen_ai.request.model", str(getattr(embedder, "name", "")))
    dim = getattr(embedder, "dim", None)
    if isinstance(dim, int):
        span.set_attribute("gen_ai.embeddings.dimension.count", dim)
    span.set_attribute("memcore.embedder.class", type(embedder).__name__)
    if isinstance(texts, (list, tuple)):
        span.set_attribute("memcore.embedding.texts", len(texts))


def _embedding_name(embedder: object) -> str:
    try:
        return f"embeddings {getattr(embedder, 'name', '')}"
    except Exception:  # a model whose name property fails still embeds (and fails there)
        return "embeddings"


def _open_embedding(
    tracer: Tracer, embedder: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Opened:
    span, token = start_span(tracer, _embedding_name(embedder), "INTERNAL", None)
    if span.is_recording():
        with contextlib.suppress(Exception):  # a model whose name or dim fails still embeds
            _describe_embedding(span, embedder, args[0] if args else kwargs.get("texts"))
    return Opened(span, token, lambda span, result: None)


def traced_embed(method: F) -> F:
    """Give an embedder's ``embed`` or ``aembed`` the GenAI embeddings span ``embeddings {model}``."""
    return instrumented(method, _open_embedding)


def capture_context() -> object:
    """The caller's OpenTelemetry context, for work another thread does on its behalf
    (:func:`batch_scope`); ``None`` when nothing is traced."""
    if active_tracer() is None:
        return None
    from opentelemetry import context

    return context.get_current()


@contextlib.contextmanager
def _batch(tracer: Tracer, contexts: list[Context]) -> Iterator[None]:
    from opentelemetry import context, trace

    links = []
    for caller in contexts:
        span_context = trace.get_current_span(caller).get_span_context()
        if span_context.is_valid:
            links.append(trace.Link(span_context))
    # A root span linked to every caller: no one caller's trace owns the shared model call.
    batch = tracer.start_span(
        "memcore.embeddings.batch",
        context=context.Context(),
        kind=trace.SpanKind.INTERNAL,
        links=links,
        attributes={"memcore.embedding.requests": len(contexts)},
    )
    token = context.attach(trace.set_span_in_context(batch))
    try:
        yield
    finally:
        context.detach(token)
        batch.end()


@contextlib.contextmanager
def _within(caller: Context) -> Iterator[None]:
    from opentelemetry import context

    token = context.attach(caller)
    try:
        yield
    finally:
        context.detach(token)


def batch_scope(contexts: Sequence[object]) -> contextlib.AbstractContextManager[None]:
    """Where a batching worker runs one model call for several callers (each context from
    :func:`capture_context`): within the caller's context when there is one, else under a root
    span linked to each of them."""
    tracer = active_tracer()
    callers = [cast("Context", caller) for caller in contexts if caller is not None]
    if tracer is None or not callers:
        return NULL_CONTEXT
    if len(callers) == 1:
        return _within(callers[0])
    return _batch(tracer, callers)
