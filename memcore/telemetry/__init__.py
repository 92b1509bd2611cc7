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

from memcore.telemetry.embeddings import batch_scope, capture_context, traced_embed
from memcore.telemetry.memories import memory_operation, note_query, note_records
from memcore.telemetry.stores import store_operation
from memcore.telemetry.tracing import (
    CAPTURE_ENV,
    TRACER_NAME,
    capturing_content,
    current_span,
    instrument,
    internal_span,
    record_error,
    reset,
    uninstrument,
)

__all__ = [
    "CAPTURE_ENV",
    "TRACER_NAME",
    "batch_scope",
    "capture_context",
    "capturing_content",
    "current_span",
    "instrument",
    "internal_span",
    "memory_operation",
    "note_query",
    "note_records",
    "record_error",
    "reset",
    "store_operation",
    "traced_embed",
    "uninstrument",
]
