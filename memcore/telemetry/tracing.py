"""The tracer memcore's spans start from, and how an instrumented call starts and ends one.

The only place that decides whether memcore traces: the state :func:`instrument`,
:func:`uninstrument` and :func:`reset` set, read on every instrumented call through
:func:`instrumented`'s wrappers (see :mod:`memcore.telemetry`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from memcore.errors import InvalidInputError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider


CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' opt-in for content on spans (``true``, ``span_only``, ``span_and_event``)."""
_CAPTURE_VALUES = frozenset({"true", "1", "yes", "span_only", "span_and_event"})
TRACER_NAME: Final = "memcore"

_tracer: Tracer | None = None
"""The tracer spans start from, once settled: an explicit provider's, the global provider's once
the application has set one, or ``None`` (OpenTelemetry absent, or :func:`uninstrument`)."""
_settled = False
"""Whether :data:`_tracer` is final; until then each span asks :func:`_follow`."""
_global_provider: Callable[[], TracerProvider | None] | None = None
_capture: bool = False
_capture_override: bool | None = None
in_memory_call: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "memcore_memory_call", default=None
)
"""The memory whose call is being traced: its nested calls (``get_context`` -> ``retrieve``) get no span."""
store_spans_off: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memcore_store_spans_off", default=False
)
"""Set within a step that counts its store calls itself (:func:`internal_span`'s ``store_spans``)."""
NULL_CONTEXT: Final = contextlib.nullcontext(None)
"""What a ``with`` of an untraced step enters."""


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
        _tracer, _settled = _recording_tracer(tracer_provider), True


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
    return active_tracer() is not None and _capture


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


def active_tracer() -> Tracer | None:
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
    _tracer, _settled = _recording_tracer(provider), True
    return _tracer


def _recording_tracer(provider: TracerProvider) -> Tracer | None:
    """``provider``'s tracer for memcore, or ``None`` if it is a no-op one (the SDK's when
    ``OTEL_SDK_DISABLED`` is set), whose spans would only cost their context switches."""
    from opentelemetry import trace

    tracer = provider.get_tracer(TRACER_NAME, _version())
    return None if isinstance(tracer, trace.NoOpTracer) else tracer


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


def start_span(
    tracer: Tracer, name: str, kind_name: str, attributes: Mapping[str, str] | None
) -> tuple[Span, object]:
    """Start a span of kind ``kind_name`` and make it current; returns it and the context token
    :func:`end_span` takes."""
    global _api
    api = _api if _api is not None else (_api := _Api())
    span = tracer.start_span(name, kind=api.kinds[kind_name], attributes=attributes)
    return span, api.attach(api.in_context(span))


def end_span(span: Span, token: object, error: BaseException | None) -> None:
    """Restore the context :func:`start_span` replaced and end ``span``, failed by ``error`` if any."""
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
    span, token = start_span(tracer, name, "INTERNAL", None)
    quiet = None if store_spans else store_spans_off.set(True)
    try:
        yield span
    except BaseException as error:
        end_span(span, token, error)
        raise
    finally:
        if quiet is not None:
            store_spans_off.reset(quiet)
    end_span(span, token, None)


def internal_span(name: str, *, store_spans: bool = True) -> contextlib.AbstractContextManager[Span | None]:
    """``with internal_span("memcore.context.create") as span:`` a span of kind INTERNAL around a
    step of a memory call; ``span`` is ``None`` when nothing is traced (set attributes only
    when it is not ``None`` and ``span.is_recording()``).

    :param store_spans: whether the store calls within get spans of their own; a step that makes
        many small reads (hybrid recall's neighbour reads) says ``False`` and counts them itself.
    """
    tracer = active_tracer()
    if tracer is None:
        return NULL_CONTEXT
    return _span(tracer, name, store_spans)


def current_span() -> Span | None:
    """The recording span of this context, if memcore traces and one is recording."""
    if active_tracer() is None:
        return None
    from opentelemetry import trace

    span = trace.get_current_span()
    return span if span.is_recording() else None


class Opened:
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
        """End the span: described by ``result`` when the call returned, failed when it raised.

        A description that fails costs its attributes, never the call's result or the span's end.
        """
        try:
            if error is None and self.span.is_recording():
                with contextlib.suppress(Exception):
                    self.describe(self.span, result)
        finally:
            if self.inside is not None:
                in_memory_call.reset(self.inside)
            end_span(self.span, self.token, error)


Opener = Callable[["Tracer", Any, tuple[Any, ...], dict[str, Any]], Opened | None]
"""``opener(tracer, self, args, kwargs)``: the span an instrumented call starts, or ``None``."""
F = TypeVar("F", bound=Callable[..., Any])


def _open(
    opener: Opener, tracer: Tracer, instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Opened | None:
    """The span ``opener`` starts, or none if the opener fails: tracing never fails a call. An
    opener fails before it starts its span, or not at all (it describes the span guarded), so a
    failure leaves no span current."""
    try:
        return opener(tracer, instance, args, kwargs)
    except Exception:
        return None


def instrumented(method: F, opener: Opener) -> F:
    """``method`` (sync or a coroutine function) in the span ``opener`` starts for each call.

    The wrapper says ``memcore_traced`` and keeps ``method`` as ``__wrapped__`` (the overhead
    benchmark, ``benchmarks/telemetry_overhead.py``, unwraps them to measure memcore without them)."""
    if inspect.iscoroutinefunction(method):

        async def traced_async(self: object, /, *args: Any, **kwargs: Any) -> Any:
            tracer = _tracer if _settled else _follow()
            opened = None if tracer is None else _open(opener, tracer, self, args, kwargs)
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
        opened = None if tracer is None else _open(opener, tracer, self, args, kwargs)
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
