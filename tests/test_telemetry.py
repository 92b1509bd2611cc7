"""OpenTelemetry spans (memcore.telemetry), checked with the SDK's in-memory span exporter.

Each test gets its own TracerProvider through ``telemetry.instrument(provider)``; the global
provider is never set, so tests stay isolated from each other and from the rest of the suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from uuid import uuid4

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from memcore import telemetry
from memcore.agent.memories import LongtermMemory
from memcore.embedders.hashing import HashEmbedder
from memcore.errors import InvalidInputError, RecordNotFoundError
from memcore.records import MemoryRecord, Message
from memcore.scope import Scope
from memcore.store import BaseStore
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore

ALICE = Scope(tenant="acme", user_id="alice", agent_id="travel", session_id="day-1")
SECRET = "My cat is called Mochi"
QUESTION = "what is my pet called"


class Traced:
    """The spans one test's provider finished, with the helpers the assertions need."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider) -> None:
        self.exporter, self.provider = exporter, provider

    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def clear(self) -> None:
        self.exporter.clear()

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        return [
            span
            for span in self.spans()
            if span.parent is not None and span.parent.span_id == parent.context.span_id
        ]

    def roots(self) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.parent is None]

    def every_value(self) -> str:
        """Every attribute and event value of every span, as one string to search."""
        values = []
        for span in self.spans():
            values += [str(value) for value in (span.attributes or {}).values()]
            values += [str(value) for event in span.events for value in (event.attributes or {}).values()]
            values.append(str(span.status.description))
        return "\n".join(values)


def _traced(capture_content: bool | None = False) -> Traced:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider, capture_content=capture_content)
    return Traced(exporter, provider)


@pytest.fixture
def traced() -> Iterator[Traced]:
    yield _traced()
    telemetry.reset()


@pytest.fixture
def capturing() -> Iterator[Traced]:
    yield _traced(capture_content=True)
    telemetry.reset()


@pytest.fixture
def memory() -> Iterator[LongtermMemory]:
    store = InMemoryStore()
    memory = LongtermMemory(store, HashEmbedder(), ALICE, window=4)
    memory.write([Message(role="system", content="You plan trips."), Message(role="user", content=SECRET)])
    memory.write([Message(role="assistant", content="Noted.")] * 4)  # SECRET leaves the window
    yield memory
    store.close()


def _check_get_context_tree(traced: Traced, method: str) -> ReadableSpan:
    [root] = traced.roots()
    assert root.name == "search_memory" and root.kind == SpanKind.INTERNAL
    attributes = root.attributes or {}
    assert attributes["gen_ai.operation.name"] == "search_memory"
    assert attributes["memcore.memory.method"] == method
    assert attributes["gen_ai.agent.id"] == "travel" and attributes["gen_ai.conversation.id"] == "day-1"
    assert attributes["memcore.recall.mode"] == "hybrid" and attributes["db.system.name"] == "memcore.memory"
    assert attributes["gen_ai.memory.record.count"] == 6 and attributes["memcore.context.tokens"] > 0
    children = traced.children(root)
    names = [span.name for span in children]
    assert {"list memcore.memory", "embeddings hash", "search memcore.memory"} <= set(names)
    assert names[-2:] == ["memcore.recall.fuse", "memcore.context.create"]
    kinds = sorted(
        (span.attributes or {})["memcore.search.kind"] for span in traced.named("search memcore.memory")
    )
    assert kinds == ["keywords", "vector"]
    assert all(span in children for span in traced.named("search memcore.memory"))
    for span in traced.named("search memcore.memory") + traced.named("list memcore.memory"):
        assert span.kind == SpanKind.CLIENT
        assert (span.attributes or {})["db.operation.name"] in ("search", "list")
    [fuse] = traced.named("memcore.recall.fuse")
    assert (fuse.attributes or {})["memcore.recall.hits"] >= 1
    assert (fuse.attributes or {})["memcore.recall.neighbour_reads"] >= 2  # counted, not a span each
    assert traced.children(fuse) == []
    [create] = traced.named("memcore.context.create")
    assert (create.attributes or {})["memcore.context.messages"] == 6
    assert all(span.context.trace_id == root.context.trace_id for span in traced.spans())
    return root


def test_get_context_span_tree(traced: Traced, memory: LongtermMemory) -> None:
    traced.clear()
    messages, _ = memory.get_context(query=QUESTION)
    assert any(message["content"] == SECRET for message in messages)  # recalled
    _check_get_context_tree(traced, "get_context")
    by_class = {
        (span.attributes or {})["memcore.embedder.class"]: span for span in traced.named("embeddings hash")
    }
    embedding, model = by_class["CachedEmbedder"], by_class["HashEmbedder"]  # the model: a cache miss
    attributes = embedding.attributes or {}
    assert (
        attributes["gen_ai.operation.name"] == "embeddings" and attributes["gen_ai.request.model"] == "hash"
    )
    assert attributes["gen_ai.embeddings.dimension.count"] == 256
    assert model.parent is not None and model.parent.span_id == embedding.context.span_id


def test_content_and_personal_ids_are_not_captured_by_default(traced: Traced, memory: LongtermMemory) -> None:
    memory.get_context(query=QUESTION)
    memory.store.search(ALICE, keywords="Mochi")
    with pytest.raises(InvalidInputError):
        memory.store.search(ALICE, text=" ", limit=3)
    seen = traced.every_value()
    for private in (SECRET, "Mochi", QUESTION, "You plan trips", "acme", "alice"):
        assert private not in seen
    assert "memcore.scope.user_id" not in seen


def test_content_is_captured_when_enabled(capturing: Traced, memory: LongtermMemory) -> None:
    memory.get_context(query=QUESTION)
    [root] = capturing.named("search_memory")
    attributes = root.attributes or {}
    assert attributes["gen_ai.memory.query.text"] == QUESTION
    records = json.loads(str(attributes["gen_ai.memory.records"]))
    assert SECRET in [record["content"] for record in records]
    assert attributes["memcore.scope.tenant"] == "acme" and attributes["memcore.scope.user_id"] == "alice"
    capturing.clear()
    memory.store.search(ALICE, keywords="Mochi")
    [search] = capturing.named("search memcore.memory")
    assert (search.attributes or {})["db.query.text"] == "Mochi"
    with pytest.raises(InvalidInputError):
        memory.store.search(ALICE, text=" ")
    assert "text must be a non-empty string" in capturing.every_value()


def test_the_environment_variable_switches_capture_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_ENV, "SPAN_ONLY")
    try:
        traced = _traced(capture_content=None)
        assert telemetry.capturing_content()
        store = InMemoryStore()
        store.add([MemoryRecord(scope=ALICE, message=Message(role="user", content=SECRET))])
        store.search(ALICE, text="cat")
        assert (traced.named("search memcore.memory")[0].attributes or {})["db.query.text"] == "cat"
    finally:
        telemetry.reset()
    monkeypatch.setenv(telemetry.CAPTURE_ENV, "false")
    try:
        _traced(capture_content=None)
        assert not telemetry.capturing_content()
    finally:
        telemetry.reset()


def test_async_spans_parent_across_the_worker_threads(traced: Traced, memory: LongtermMemory) -> None:
    async def main() -> None:
        await memory.aget_context(query=QUESTION)

    traced.clear()
    asyncio.run(main())
    root = _check_get_context_tree(traced, "aget_context")
    # the query embedded ahead on the loop (and the model call on the model's worker) is inside it too
    assert any(span.name == "embeddings hash" for span in traced.children(root))


@pytest.mark.parametrize("url", ["memory://", "jsonl"])
def test_store_spans_sync_and_async(traced: Traced, url: str, tmp_path: Path) -> None:
    store: BaseStore = InMemoryStore() if url == "memory://" else JsonlStore.from_url(f"jsonl://{tmp_path}")
    system = "memcore.memory" if url == "memory://" else "memcore.jsonl"
    records = [MemoryRecord(scope=ALICE, message=Message(role="user", content=f"fact {i}")) for i in range(3)]
    tracer = traced.provider.get_tracer("test")

    async def main() -> None:
        with tracer.start_as_current_span("app"):
            await store.aadd(records)
            assert len(await store.alist(ALICE, limit=2)) == 2
            assert await store.adelete(ALICE, [records[0].id]) == 1

    with tracer.start_as_current_span("app"):
        store.add(records)
        assert store.count(ALICE) == 3
        assert store.delete(ALICE, [records[0].id]) == 1
    asyncio.run(main())
    store.close()
    apps = traced.named("app")
    assert len(apps) == 2
    for app in apps:
        children = traced.children(app)
        assert [span.name.split()[1] for span in children] == [system] * 3
        attributes = [span.attributes or {} for span in children]
        assert attributes[0]["db.operation.name"] == "add" and attributes[0]["memcore.store.records"] == 3
        assert (
            attributes[-1]["db.operation.name"] == "delete" and attributes[-1]["memcore.store.affected"] == 1
        )
        assert all(span.status.status_code == StatusCode.UNSET for span in children)
    sync_children, async_children = (traced.children(app) for app in apps)
    assert (sync_children[1].attributes or {})["memcore.store.count"] == 3
    assert (async_children[1].attributes or {})["db.response.returned_rows"] == 2


def test_a_typed_error_propagates_and_marks_the_span(traced: Traced) -> None:
    store = InMemoryStore()
    missing = uuid4()
    with pytest.raises(RecordNotFoundError) as raised:
        store.update(ALICE, missing, content="new")
    assert type(raised.value) is RecordNotFoundError

    async def main() -> None:
        with pytest.raises(RecordNotFoundError):
            await store.aupdate(ALICE, missing, content="new")

    asyncio.run(main())
    spans = traced.named("update memcore.memory")
    assert len(spans) == 2
    for span in spans:
        assert span.status.status_code == StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "memcore.errors.RecordNotFoundError"
        [event] = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "memcore.errors.RecordNotFoundError"
        assert "exception.message" not in (event.attributes or {})  # it names the scope
    assert "acme" not in traced.every_value()


def test_memory_writes_and_deletes(traced: Traced) -> None:
    store = InMemoryStore()
    memory = LongtermMemory(store, HashEmbedder(), ALICE)
    written = memory.observe([Message(role="user", content=SECRET), Message(role="assistant", content="ok")])
    note = memory.remember("Alice prefers aisle seats")
    assert memory.forget([written[0].id]) == 1
    [observe, remember, forget] = traced.roots()  # observe's own write gets no second span
    assert (observe.name, remember.name, forget.name) == ("create_memory", "upsert_memory", "delete_memory")
    assert (observe.attributes or {})["gen_ai.memory.record.count"] == 2
    assert [span.name for span in traced.children(observe)] == ["embeddings hash", "add memcore.memory"]
    assert (remember.attributes or {})["gen_ai.memory.record.id"] == str(note.id)
    assert "search memcore.memory" in [span.name for span in traced.children(remember)]  # consolidation
    assert (forget.attributes or {})["gen_ai.memory.record.count"] == 1
    assert [span.name for span in traced.children(forget)] == ["delete memcore.memory"]


def test_an_embedding_batch_links_its_callers(traced: Traced) -> None:
    tracer = traced.provider.get_tracer("test")
    callers = []
    for name in ("agent-1", "agent-2"):
        with tracer.start_as_current_span(name):
            callers.append(telemetry.capture_context())
    with telemetry.batch_scope(callers), tracer.start_as_current_span("model"):
        pass
    [batch] = traced.named("memcore.embeddings.batch")
    assert batch.parent is None and (batch.attributes or {})["memcore.embedding.requests"] == 2
    linked = {link.context.span_id for link in batch.links}
    assert linked == {span.context.span_id for span in traced.spans() if span.name.startswith("agent-")}
    [model] = traced.named("model")
    assert model.parent is not None and model.parent.span_id == batch.context.span_id
    with telemetry.batch_scope(callers[:1]), tracer.start_as_current_span("alone"):
        pass
    [alone] = traced.named("alone")
    [first] = traced.named("agent-1")
    assert alone.parent is not None and alone.parent.span_id == first.context.span_id


class _NamelessEmbedder(HashEmbedder):
    """A model whose name cannot be read (say, a model card fetched lazily that times out)."""

    @property
    def name(self) -> str:
        raise TimeoutError("model card fetch timed out")


def test_a_span_that_cannot_be_described_never_fails_the_call_or_stays_current(traced: Traced) -> None:
    from opentelemetry import trace

    embedder = _NamelessEmbedder()
    assert embedder.embed(["hello"]).shape == (1, embedder.dim)  # the call works, traced
    assert not trace.get_current_span().get_span_context().is_valid  # no span left current
    [span] = traced.spans()
    assert span.name == "embeddings" and span.end_time is not None
    assert asyncio.run(embedder.aembed(["hello"])).shape == (1, embedder.dim)


def test_a_disabled_sdk_starts_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    exporter, provider = InMemorySpanExporter(), TracerProvider()  # reads the variable
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(provider)
    try:
        assert telemetry.tracing.active_tracer() is None  # no no-op span per call either
        InMemoryStore().count(ALICE)
        assert exporter.get_finished_spans() == ()
    finally:
        telemetry.reset()


def test_uninstrument_emits_nothing(traced: Traced, memory: LongtermMemory) -> None:
    traced.clear()
    telemetry.uninstrument()
    memory.get_context(query=QUESTION)
    assert traced.spans() == ()
    assert telemetry.current_span() is None and not telemetry.capturing_content()


NO_OTEL = textwrap.dedent(
    """
    import asyncio, sys
    from importlib.abc import MetaPathFinder

    class NoOpenTelemetry(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    from memcore import LongtermMemory, Message, Scope, open_embedder, open_store, telemetry
    from memcore.errors import InvalidInputError

    store = open_store("memory://")
    memory = LongtermMemory(store, open_embedder("hash"), Scope(tenant="t", user_id="u"))
    memory.write([Message(role="user", content="my locker is 7")])
    messages, _ = memory.get_context(query="locker")
    asyncio.run(memory.aget_context(query="locker"))
    assert [m["content"] for m in messages] == ["my locker is 7"], messages
    assert telemetry.tracing._tracer is None, telemetry.tracing._tracer
    assert not [name for name in sys.modules if name.startswith("opentelemetry")]
    try:
        telemetry.instrument()
    except InvalidInputError as error:
        print("refused:", error)
    """
)


def test_memcore_runs_without_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MEMCORE_LOAD_PLUGINS": ""},
    )
    assert done.returncode == 0, done.stderr
    assert "refused: memcore.telemetry needs opentelemetry-api" in done.stdout


GLOBAL_PROVIDER = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from memcore import Scope, open_store, telemetry

    store = open_store("memory://")
    scope = Scope(tenant="t", user_id="u")
    store.count(scope)  # the API's no-op provider: no span started
    assert telemetry.tracing._tracer is None and not telemetry.tracing._settled
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    store.count(scope)
    print([span.name for span in exporter.get_finished_spans()])
    """
)


def test_the_default_follows_the_global_provider_once_set() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MEMCORE_LOAD_PLUGINS": "", telemetry.CAPTURE_ENV: ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['count memcore.memory']"
