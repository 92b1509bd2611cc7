"""OpenTelemetry spans for store operations, memory calls and embeddings (``memcore[otel]``).

memcore emits spans through the OpenTelemetry API whenever ``opentelemetry-api`` is installed,
to the global tracer provider (none configured: OpenTelemetry's no-op tracer), or to the one
given to :func:`instrument`. Without the API nothing of it is imported and each instrumented
call costs one check of a module global. This is the only module that imports
``opentelemetry``, on the first instrumented call.

What gets a span, following the OpenTelemetry semantic conventions where they define one:

* a memory call (``write``, ``observe``, ``remember``, ``update``, ``retrieve``,
  ``get_context``, ``forget``, ``forget_where``, ``clear``, ``barrier`` and their async twins):
  the GenAI memory span, named by its ``gen_ai.operation.name`` (``create_memory``,
  ``upsert_memory``, ``update_memory``, ``search_memory``, ``delete_memory``), kind INTERNAL;
  only the outermost call of one memory gets one (``get_context`` calls ``retrieve``);
* a store operation (``add``, ``get``, ``vectors``, ``list``, ``search``, ``count``, ``delete``,
  ``delete_where``, ``update``, ``refresh``, ``scopes``, ``sweep``, ``purge`` and the twins):
  a database client span, ``{db.operation.name} {db.system.name}``, kind CLIENT;
* an embedding call: the GenAI embeddings span, ``embeddings {gen_ai.request.model}``;
* hybrid recall's fusion (``memcore.recall.fuse``) and context creation
  (``memcore.context.create``), kind INTERNAL.

Content (message texts, queries, keywords) and the tenant and user ids of scopes are left out
unless capture is switched on: ``instrument(capture_content=True)``, or the GenAI
conventions' environment variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
(``true`` or ``span_only``/``span_and_event``), read when memcore first traces. Exception
events then carry the exception's message too (memcore's messages may quote input).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import os
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from memcore.errors import InvalidInputError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider


CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for content on spans (``true``, ``span_only``, ``span_and_event``)."""
_CAPTURE_VALUES = frozenset({"true", "1", "yes", "span_only", "span_and_event"})
TRACER_NAME: Final = "memcore"

DB_SYSTEMS: Final[Mapping[str, str]] = {
    "memory": "memcore.memory",
    "jsonl": "memcore.jsonl",
    "pgvector": "postgresql",
    "qdrant": "qdrant",
    "chroma": "chromadb",
}
"""``db.system.name`` by the store's name (up to its first ``-``); a store class may set
``db_system_name`` itself; any other store is ``memcore.<name>``."""


_tracer: Tracer | None = None
"""The tracer spans start from, once settled: an explicit provider's, the global provider's once
the application has set one, or ``None`` (OpenTelemetry absent, or :func:`uninstrument`)."""
_settled = False
"""Whether :data:`_tracer` is final; until then each span asks :func:`_follow`."""
_global_provider: Callable[[], TracerProvider | None] | None = None
_capture: bool = False
_capture_override: bool | None = None
_in_memory_call: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "memcore_memory_call", default=None
)
_store_spans_off: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memcore_store_spans_off", default=False
)
_NULL: Final = contextlib.nullcontext(None)
_store_names: dict[tuple[type, str], tuple[str, dict[str, str]]] = {}


def instrument(tracer_provider: TracerProvider | None = None, *, capture_content: bool | None = None) -> None:
    """Trace memcore through ``tracer_provider``, with content captured or not.

    :param tracer_provider: an OpenTelemetry ``TracerProvider`` (tests pass their own); by
        default the global one, as without this call: until the application sets one (the API's
        no-op proxy), memcore starts no span at all.
    :param capture_content: put message texts, queries and scope tenant and user ids on spans;
        ``None`` reads :data:`CAPTURE_ENV`.
    :raises InvalidInputError: if ``opentelemetry-api`` is not installed.
    """
    global _tracer, _settled, _capture, _capture_override
    if not _import_api():
        raise InvalidInputError("memcore.telemetry needs opentelemetry-api: pip install 'memcore[otel]'")
    _capture_override = capture_content
    _capture = _capture_setting()
    if tracer_provider is None:
        _tracer, _settled = None, False
    else:
        _tracer, _settled = tracer_provider.get_tracer(TRACER_NAME, _version()), True


def uninstrument() -> None:
    """Emit no spans at all, as when OpenTelemetry is not installed (until :func:`instrument`)."""
    global _tracer, _settled
    _tracer, _settled = None, True


def reset() -> None:
    """Back to the default: the global tracer provider if the API is installed, capture from the
    environment, both decided again on the next instrumented call."""
    global _tracer, _settled, _capture_override, _global_provider, _trace_api
    _tracer, _settled, _capture_override, _global_provider, _trace_api = None, False, None, None, None


def capturing_content() -> bool:
    """Whether spans carry content (see the module docstring)."""
    return _active() is not None and _capture


def _capture_setting() -> bool:
    if _capture_override is not None:
        return _capture_override
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in _CAPTURE_VALUES


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memcore")
    except PackageNotFoundError:
        return "0"


_no_op_providers: tuple[type, ...] = ()
"""The API's own providers, which never record: while the global provider is one of them, memcore
starts no span (a no-op span would only carry its parent's context, which children see anyway)."""


def _import_api() -> bool:
    """Import the API once; ``False`` when it is not installed."""
    global _global_provider, _trace_api, _no_op_providers
    if _global_provider is None:
        try:
            from opentelemetry import trace
        except ImportError:
            return False
        _no_op_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        trace.get_tracer_provider()  # loads the provider OTEL_PYTHON_TRACER_PROVIDER names, if any
        if isinstance(getattr(trace, "_TRACER_PROVIDER", ...), (type(None), trace.TracerProvider)):
            # What the global set_tracer_provider() sets, read directly (_follow): the public
            # get_tracer_provider() consults os.environ on every call, about a microsecond on
            # every store call before any provider exists.
            _trace_api = trace
        _global_provider = trace.get_tracer_provider  # else the public way (the API changed)
    return True


_trace_api: Any = None
"""``opentelemetry.trace`` once imported, when its global provider can be read directly."""


def _active() -> Tracer | None:
    """The tracer spans start from now, or ``None``."""
    return _tracer if _settled else _follow()


def _follow() -> Tracer | None:
    """Follow the global provider: nothing while it is the API's no-op one; its tracer, for good,
    once the application has set another (the API sets it only once)."""
    global _tracer, _settled, _capture
    if _trace_api is not None:
        provider = _trace_api._TRACER_PROVIDER
        if provider is None:  # the hot path while no provider is set
            return None
    else:
        if _global_provider is None:
            if not _import_api():
                _tracer, _settled = None, True
                return None
            _capture = _capture_setting()
            return _follow()
        provider = _global_provider()
    if type(provider) in _no_op_providers:
        return None
    _tracer, _settled = provider.get_tracer(TRACER_NAME, _version()), True
    return _tracer


# -- starting and ending spans ----------------------------------------------------------------


class _Api:
    """The few OpenTelemetry functions the hot path calls, looked up once."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.attach = context.attach
        self.detach = context.detach
        self.in_context = trace.set_span_in_context
        self.kinds = {kind.name: kind for kind in trace.SpanKind}


_api: _Api | None = None


def _start(
    tracer: Tracer, name: str, kind_name: str, attributes: Mapping[str, str] | None
) -> tuple[Span, object]:
    global _api
    api = _api if _api is not None else (_api := _Api())
    span = tracer.start_span(name, kind=api.kinds[kind_name], attributes=attributes)
    return span, api.attach(api.in_context(span))


def _end(span: Span, token: object, error: BaseException | None) -> None:
    if error is not None and span.is_recording():
        record_error(span, error)
    assert _api is not None
    _api.detach(token)  # type: ignore[arg-type]
    span.end()


def record_error(span: Span, error: BaseException) -> None:
    """Mark ``span`` failed by ``error``: status ERROR, ``error.type`` its qualified class name,
    and an exception event (its message only when capturing content)."""
    from opentelemetry.trace import Status, StatusCode

    kind = f"{type(error).__module__}.{type(error).__qualname__}"
    event: dict[str, str] = {
        "exception.type": kind,
        "exception.stacktrace": "".join(traceback.format_tb(error.__traceback__)),
    }
    if _capture:
        event["exception.message"] = str(error)
    span.add_event("exception", event)
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, str(error) if _capture else kind))


@contextlib.contextmanager
def _span(tracer: Tracer, name: str, store_spans: bool) -> Iterator[Span]:
    span, token = _start(tracer, name, "INTERNAL", None)
    quiet = None if store_spans else _store_spans_off.set(True)
    try:
        yield span
    except BaseException as error:
        _end(span, token, error)
        raise
    finally:
        if quiet is not None:
            _store_spans_off.reset(quiet)
    _end(span, token, None)


def internal_span(name: str, *, store_spans: bool = True) -> contextlib.AbstractContextManager[Span | None]:
    """``with internal_span("memcore.context.create") as span:`` a span of kind INTERNAL around a
    step of a memory call; ``span`` is ``None`` when nothing is traced (set attributes only
    when it is not ``None`` and ``span.is_recording()``).

    :param store_spans: whether the store calls within get spans of their own; a step that makes
        many small reads (hybrid recall's neighbour reads) says ``False`` and counts them itself.
    """
    tracer = _active()
    if tracer is None:
        return _NULL
    return _span(tracer, name, store_spans)


def current_span() -> Span | None:
    """The recording span of this context, if memcore traces and one is recording."""
    if _active() is None:
        return None
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


# -- store operations ---------------------------------------------------------------------------


def _db_system(store: object) -> str:
    system = getattr(type(store), "db_system_name", None)
    if isinstance(system, str):
        return system
    name = str(getattr(type(store), "name", type(store).__name__))
    return DB_SYSTEMS.get(name.split("-")[0], f"memcore.{name}")


def _store_span_name(store: object, operation: str) -> tuple[str, dict[str, str]]:
    key = (type(store), operation)
    found = _store_names.get(key)
    if found is None:
        system = _db_system(store)
        found = _store_names[key] = (
            f"{operation} {system}",
            {"db.system.name": system, "db.operation.name": operation},
        )
    return found


class _Opened:
    """A span an instrumented call started, and what to do when the call returns or raises."""

    __slots__ = ("describe", "inside", "span", "token")

    def __init__(
        self,
        span: Span,
        token: object,
        describe: Callable[[Span, object], None],
        inside: contextvars.Token[object | None] | None = None,
    ) -> None:
        self.span, self.token, self.describe, self.inside = span, token, describe, inside

    def close(self, error: BaseException | None, result: object = None) -> None:
        if self.inside is not None:
            _in_memory_call.reset(self.inside)
        if error is None and self.span.is_recording():
            self.describe(self.span, result)
        _end(self.span, self.token, error)


Opener = Callable[["Tracer", Any, tuple[Any, ...], dict[str, Any]], _Opened | None]
"""``opener(tracer, self, args, kwargs)``: the span an instrumented call starts, or ``None``."""
F = TypeVar("F", bound=Callable[..., Any])


def _instrumented(method: F, opener: Opener) -> F:
    """``method`` (sync or a coroutine function) in the span ``opener`` starts for each call.

    The wrapper says ``memcore_traced`` and keeps ``method`` as ``__wrapped__`` (the overhead
    benchmark, ``benchmarks/telemetry_overhead.py``, unwraps them to measure memcore without them)."""
    if inspect.iscoroutinefunction(method):

        async def traced_async(self: object, /, *args: Any, **kwargs: Any) -> Any:
            tracer = _tracer if _settled else _follow()
            opened = None if tracer is None else opener(tracer, self, args, kwargs)
            if opened is None:
                return await method(self, *args, **kwargs)
            try:
                result = await method(self, *args, **kwargs)
            except BaseException as error:
                opened.close(error)
                raise
            opened.close(None, result)
            return result

        traced_async.memcore_traced = True  # type: ignore[attr-defined]
        return cast(F, functools.update_wrapper(traced_async, method))

    def traced(self: object, /, *args: Any, **kwargs: Any) -> Any:
        tracer = _tracer if _settled else _follow()
        opened = None if tracer is None else opener(tracer, self, args, kwargs)
        if opened is None:
            return method(self, *args, **kwargs)
        try:
            result = method(self, *args, **kwargs)
        except BaseException as error:
            opened.close(error)
            raise
        opened.close(None, result)
        return result

    traced.memcore_traced = True  # type: ignore[attr-defined]
    return cast(F, functools.update_wrapper(traced, method))


def store_operation(operation: str) -> Callable[[F], F]:
    """Give a store method (sync, or its async twin: the span is current while its work runs on
    the store's workers, which copy the caller's context) a database client span named
    ``{operation} {db.system.name}``."""

    def opener(
        tracer: Tracer, store: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Opened | None:
        if _store_spans_off.get():
            return None
        name, attributes = _store_span_name(store, operation)
        span, token = _start(tracer, name, "CLIENT", attributes)
        return _Opened(
            span, token, lambda span, result: _describe_store_call(span, operation, args, kwargs, result)
        )

    return lambda method: _instrumented(method, opener)


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
        if value is not None and (_capture or field not in _PRIVATE_SCOPE_FIELDS):
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
    if _capture and isinstance(query, str):
        span.set_attribute("db.query.text", query)


# -- memory calls -------------------------------------------------------------------------------


def memory_operation(operation: str) -> Callable[[F], F]:
    """Give a memory method (sync or async) a GenAI memory span named ``operation``
    (``search_memory``, ...), unless it runs inside another call of the same memory
    (``get_context`` calls ``retrieve``; an async twin's span covers the embedding done on the
    loop and the sync logic on the store's workers, whose own span it replaces)."""

    def decorate(method: F) -> F:
        name = method.__name__

        def opener(
            tracer: Tracer, memory: object, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> _Opened | None:
            if _in_memory_call.get() is memory:
                return None
            inside = _in_memory_call.set(memory)
            span, token = _start(tracer, operation, "INTERNAL", None)
            if span.is_recording():
                _describe_memory(span, memory, operation, name)
            return _Opened(
                span, token, lambda span, result: _describe_memory_result(span, name, args, result), inside
            )

        return _instrumented(method, opener)

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
    if _capture:
        for field in ("tenant", "user_id"):
            value = getattr(scope, field, None)
            if isinstance(value, str):
                span.set_attribute(f"memcore.scope.{field}", value)
    mode = getattr(getattr(memory, "recall_block", None), "mode", None)
    if isinstance(mode, str):
        span.set_attribute("memcore.recall.mode", mode)
    store = getattr(memory, "store", None)
    if store is not None:
        span.set_attribute("db.system.name", _db_system(store))


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
    if not _capture or query is None:
        return
    span = current_span()
    if span is not None:
        span.set_attribute("gen_ai.memory.query.text", query)


def note_records(records: Sequence[object]) -> None:
    """Put records (``MemoryRecord`` or ``ContextRecord``) on the current span as the GenAI
    conventions' ``gen_ai.memory.records`` JSON, when capturing content."""
    if not _capture:
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


# -- embeddings ---------------------------------------------------------------------------------


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
) -> _Opened:
    span, token = _start(tracer, _embedding_name(embedder), "INTERNAL", None)
    if span.is_recording():
        _describe_embedding(span, embedder, args[0] if args else kwargs.get("texts"))
    return _Opened(span, token, lambda span, result: None)


def traced_embed(method: F) -> F:
    """Give an embedder's ``embed`` or ``aembed`` the GenAI embeddings span ``embeddings {model}``."""
    return _instrumented(method, _open_embedding)


def capture_context() -> object:
    """The caller's OpenTelemetry context, for work another thread does on its behalf
    (:func:`batch_scope`); ``None`` when nothing is traced."""
    if _active() is None:
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
    tracer = _active()
    callers = [cast("Context", caller) for caller in contexts if caller is not None]
    if tracer is None or not callers:
        return _NULL
    if len(callers) == 1:
        return _within(callers[0])
    return _batch(tracer, callers)
