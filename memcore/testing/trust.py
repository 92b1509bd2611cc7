"""Reliability scenarios of trust: what an adapter or an import does with records it did not write.

* :func:`adapter_trust`: the LangChain vector store, the LangGraph store (and the CAMEL memory,
  where camel-ai is installed) over a store that also holds records other memories wrote, in the
  adapter's parent, child and sibling scopes, dressed with the adapter's own metadata markers and ids.
* :func:`import_trust`: export files whose lines cross the scope the file declares, or the scope
  the import is given.

Like :mod:`memcore.testing.reliability`, each returns counts; the failure counts must be zero.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.errors import MemcoreError
from memcore.plugins import open_store
from memcore.records import MemoryRecord, Message, MetadataValue, RecordKey
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import make_record, random_vectors
from memcore.testing.reliability import Figures, fresh_location, zeros
from memcore.transfer import FORMAT, check_entries, import_entries, read_export

ADAPTER_FAILURES = (
    "foreign_reads",
    "foreign_deleted",
    "own_missing",
    "own_refused",
    "not_deleted",
    "blocked",
    "predictable_ids",
    "forged_ids",
    "untyped_errors",
)
IMPORT_FAILURES = ("accepted", "written_outside", "written_before_refusal", "untyped_errors")

_TENANT = Scope(tenant="trust")
_ALICE = Scope(tenant="trust", user_id="alice")
_CODER = Scope(tenant="trust", user_id="alice", agent_id="coder")
_SESSION = Scope(tenant="trust", user_id="alice", agent_id="coder", session_id="s1")
_BOB = Scope(tenant="trust", user_id="bob")
_SCOPES = (_TENANT, _ALICE, _CODER, _SESSION, _BOB)
_LEGACY_NAMESPACE = uuid.UUID("6c1d9a0e-2f4b-5b8e-9a57-3c0f1e7d2b61")
_DIM = 8


def _legacy_id(scope: Scope, document_id: str) -> uuid.UUID:
    """A record id anyone can derive from a scope and a document id: what an adapter must not use."""
    return uuid.uuid5(_LEGACY_NAMESPACE, f"{scope.digest()}/{document_id}")


def _outside(store: Store, scope: Scope) -> dict[RecordKey, MemoryRecord]:
    """Every record of the trust tenant that is not in exactly ``scope``."""
    return {r.key: r for r in store.list(_TENANT) if r.scope.as_tuple() != scope.as_tuple()}


def _lost(before: dict[RecordKey, MemoryRecord], store: Store, scope: Scope) -> int:
    after = _outside(store, scope)
    return sum(after.get(key) != record for key, record in before.items())


# -- adapters ------------------------------------------------------------------------------------


def adapter_trust(url: str) -> Figures:
    """Adapters read and delete only their exact scope, whatever metadata other records carry.

    Around an adapter on each of a tenant, a user, an agent and a session, other memories wrote
    records in every other of those scopes, of kind ``document`` with the adapter's own markers
    (``lc_scope``, ``lc_id``; a CAMEL record form claiming the agent and another record's uuid),
    and another scope took the ids anyone can derive from the adapter's documents. Every read path
    (similarity search with and without scores, by vector, MMR, ``get_by_ids``, their async forms;
    CAMEL's ``retrieve`` and ``get_context``) and every delete path (``delete`` by ids and whole,
    ``adelete``; CAMEL's ``clear``, ``pop_records``, ``remove_records_by_indices``, ``forget``)
    is run.

    Figures: ``foreign_reads`` (another scope's record returned), ``foreign_deleted`` (a record
    outside the exact scope deleted or changed), ``own_missing`` (the adapter's own document not
    returned), ``own_refused`` (an adapter call on its own scope failed typed), ``blocked``
    (adding a document failed because another scope took an id), ``predictable_ids`` (a document
    stored under the publicly derivable id), ``forged_ids`` (a CAMEL record returned with another
    record's uuid), ``untyped_errors``; ``langchain_checked``, ``langgraph_checked`` and
    ``camel_checked`` say which adapters ran (1 each; 0 where the package is not installed).

    The LangGraph store (:func:`_langgraph_trust`) runs the same way on each scope, and once as a
    tenant deployment whose first namespace label is the user (``namespace_scope``): records of
    kind ``langgraph`` with its namespace and key markers, in the other scopes, under the very ids
    its items have (derived from scope, namespace and key by design: a ``put`` is an idempotent
    upsert, so ``predictable_ids`` does not apply to it), and records in its own scope that are not
    its items (a turn with its markers, an item's markers under another id). Read paths: ``get``,
    ``search`` with and without a query and a filter, ``list_namespaces``, their async forms;
    delete paths: ``delete``, ``adelete``, a ``put`` of ``None`` through ``batch``.
    """
    adapters = {"langchain": _langchain_trust, "langgraph": _langgraph_trust, "camel": _camel_trust}
    figures = zeros(*ADAPTER_FAILURES, *(f"{name}_checked" for name in adapters))
    for name, check in adapters.items():
        try:
            importlib.import_module(f"memcore.integrations.{name}")  # only to know it imports
        except ImportError:
            continue
        with fresh_location(url) as location, open_store(location) as store:  # each its own store
            check(store, figures)
        figures[f"{name}_checked"] = 1
    return dict(figures)


def _guarded(figures: Any, call: Callable[[], Any], default: Any = None) -> Any:
    try:
        return call()
    except MemcoreError as exc:
        figures["own_refused"] += 1
        print(f"adapter call refused: {exc!r}"[:500])
    except Exception as exc:
        figures["untyped_errors"] += 1
        print(f"adapter call raised {exc!r}"[:500])
    return default


def _crafted_documents(
    pretends: Scope, vector: list[float]
) -> tuple[list[MemoryRecord], npt.NDArray[np.float32]]:
    records = [
        MemoryRecord(
            scope=scope,
            message=Message(role="user", content=f"crafted in {scope} as {pretends}"),
            kind="document",
            metadata={"lc_scope": pretends.digest(), "lc_id": document_id, "lc_extra": '{"x": 1}'},
        )
        for scope in _SCOPES
        if scope != pretends
        for document_id in ("1", "2")
    ]
    return records, np.asarray([vector] * len(records), dtype=np.float32)


def _langchain_trust(store: Store, figures: Any) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    embedding = DeterministicFakeEmbedding(size=_DIM)
    for scope in _SCOPES:
        _langchain_scope(store, figures, scope, embedding)
        store.delete_where(_TENANT, {})  # the next adapter starts from an empty tenant


def _langchain_scope(store: Store, figures: Any, scope: Scope, embedding: Any) -> None:
    from langchain_core.documents import Document

    from memcore.integrations.langchain import MemcoreVectorStore

    docs = MemcoreVectorStore(store, scope, embedding)
    query = embedding.embed_query("secret")
    # Another scope takes the id anyone can derive from this scope and its document "s".
    squatter = _BOB if scope != _BOB else _TENANT
    store.add([make_record(squatter, "squat").model_copy(update={"id": _legacy_id(scope, "s")})])
    try:
        docs.add_documents([Document("squatted")], ids=["s"])
        docs.delete(["s"])
    except MemcoreError as exc:
        figures["blocked"] += 1
        print(f"{scope}: adding document 's' failed: {exc!r}"[:500])
    own = f"own document of {scope}"
    if _guarded(figures, lambda: docs.add_documents([Document(own)], ids=["1"])) is None:
        return
    stored = store.list(scope.exact(), filter={"kind": "document"})
    figures["predictable_ids"] += sum(r.id == _legacy_id(scope, "1") for r in stored)
    crafted, vectors = _crafted_documents(scope, query)
    store.add(crafted, vectors)
    reads: list[Callable[[], list[Any]]] = [
        lambda: docs.similarity_search("secret", k=40),
        lambda: [d for d, _ in docs.similarity_search_with_score("secret", k=40)],
        lambda: [d for d, _ in docs.similarity_search_with_relevance_scores("secret", k=40)],
        lambda: docs.similarity_search_by_vector(query, k=40),
        lambda: docs.max_marginal_relevance_search("secret", k=40, fetch_k=40),
        lambda: docs.max_marginal_relevance_search_by_vector(query, k=40, fetch_k=40),
        lambda: docs.get_by_ids(["1", "2"]),
        lambda: asyncio.run(docs.asimilarity_search("secret", k=40)),
        lambda: asyncio.run(docs.amax_marginal_relevance_search("secret", k=40, fetch_k=40)),
        lambda: asyncio.run(docs.aget_by_ids(["1", "2"])),
    ]
    for read in reads:
        found = _guarded(figures, read, [])
        figures["foreign_reads"] += sum(d.page_content != own for d in found)
        figures["own_missing"] += int(not any(d.page_content == own and d.id == "1" for d in found))
    before = _outside(store, scope)
    deletes: list[Callable[[], Any]] = [
        lambda: docs.delete(["1", "2"]),
        lambda: docs.delete(),
        lambda: asyncio.run(docs.adelete(["1", "2"])),
    ]
    for delete in deletes:
        _guarded(figures, lambda: docs.add_documents([Document(own)], ids=["1"]))
        _guarded(figures, delete)
        figures["not_deleted"] += int(bool(_guarded(figures, lambda: docs.get_by_ids(["1"]), [])))
    figures["foreign_deleted"] += _lost(before, store, scope)


def _langgraph_trust(store: Store, figures: Any) -> None:
    from memcore.embedders.hashing import HashEmbedder
    from memcore.integrations.langgraph import MemcoreLangGraphStore

    embedder = HashEmbedder(dim=_DIM)
    for scope in _SCOPES:
        adapter = MemcoreLangGraphStore(store, scope, embedder=embedder)
        _langgraph_scope(store, figures, adapter, scope, ("notes",))
        store.delete_where(_TENANT, {})
    users = MemcoreLangGraphStore(store, _TENANT, embedder=embedder, namespace_scope=("user_id",))
    _langgraph_scope(store, figures, users, _ALICE, ("alice", "notes"))
    store.delete_where(_TENANT, {})


def _langgraph_scope(
    store: Store, figures: Any, adapter: Any, scope: Scope, namespace: tuple[str, ...]
) -> None:
    from langgraph.store.base import PutOp

    from memcore.embedders.hashing import HashEmbedder

    layout = adapter.layout
    own_id = layout.record_id(scope, namespace, "1")
    vector = HashEmbedder(dim=_DIM).embed(["secret"])[0].tolist()
    # Another scope takes the id this adapter's item will have.
    squatter = _BOB if scope != _BOB else _TENANT
    store.add([make_record(squatter, "squat").model_copy(update={"id": own_id})])
    own = f"own item of {scope}"
    try:
        adapter.put(namespace, "1", {"text": own})
    except MemcoreError as exc:
        figures["blocked"] += 1
        print(f"{scope}: putting item '1' failed: {exc!r}"[:500])
        return
    except Exception as exc:
        figures["untyped_errors"] += 1
        print(f"{scope}: putting item '1' raised {exc!r}"[:500])
        return
    markers: dict[str, MetadataValue] = {f"lg_ns{i}": label for i, label in enumerate(namespace)}
    markers.update(lg_depth=len(namespace), lg_vall=True, lg_created="2026-01-01T00:00:00+00:00")
    crafted = [
        MemoryRecord(
            id=layout.record_id(scope, namespace, key) if key == "1" else uuid.uuid4(),
            scope=other,
            message=Message(role="user", content=json.dumps({"text": f"crafted in {other}"})),
            kind="langgraph",
            metadata={**markers, "lg_key": key, "lg_v_text": own},
        )
        for other in _SCOPES
        if other != scope
        for key in ("1", "2")
    ]
    inside = [  # in the adapter's own scope, but not its items
        MemoryRecord(
            scope=scope,
            message=Message(role="user", content=json.dumps({"text": "crafted: another id"})),
            kind="langgraph",
            metadata={**markers, "lg_key": "2", "lg_v_text": own},
        ),
        MemoryRecord(
            scope=scope,
            message=Message(role="user", content=json.dumps({"text": "crafted: a turn"})),
            metadata={**markers, "lg_key": "1", "lg_v_text": own},
        ),
    ]
    store.add([*crafted, *inside], np.asarray([vector] * (len(crafted) + len(inside)), dtype=np.float32))
    reads: list[Callable[[], list[Any]]] = [
        lambda: [adapter.get(namespace, "1")],
        lambda: adapter.search(namespace, limit=40),
        lambda: adapter.search((), limit=40),
        lambda: adapter.search((), query="secret", limit=40),
        lambda: adapter.search(namespace, filter={"text": own}, limit=40),
        lambda: [asyncio.run(adapter.aget(namespace, "1"))],
        lambda: asyncio.run(adapter.asearch((), query="secret", limit=40)),
    ]
    for read in reads:
        found = [item for item in _guarded(figures, read, []) if item is not None]
        figures["foreign_reads"] += sum(item.value.get("text") != own for item in found)
        figures["own_missing"] += int(not any(item.value.get("text") == own for item in found))
    for list_namespaces in (adapter.list_namespaces, lambda: asyncio.run(adapter.alist_namespaces())):
        listed = _guarded(figures, list_namespaces, [])
        figures["foreign_reads"] += int(listed not in ([namespace], []))
        figures["own_missing"] += int(listed != [namespace])
    figures["foreign_reads"] += int(_guarded(figures, lambda: adapter.get(namespace, "2"), None) is not None)
    before = _outside(store, scope)
    kept = {r.key for r in inside}
    deletes: list[Callable[[], Any]] = [
        lambda: adapter.delete(namespace, "1"),
        lambda: asyncio.run(adapter.adelete(namespace, "1")),
        lambda: adapter.batch([PutOp(namespace, "1", None), PutOp(namespace, "2", None)]),
    ]
    for delete in deletes:
        _guarded(figures, lambda: adapter.put(namespace, "1", {"text": own}))
        _guarded(figures, delete)
        figures["not_deleted"] += int(
            _guarded(figures, lambda: adapter.get(namespace, "1"), None) is not None
        )
    figures["foreign_deleted"] += _lost(before, store, scope)
    figures["foreign_deleted"] += len(kept - {r.key for r in store.list(scope.exact())})


class _Words:
    """A CAMEL token counter's one method memcore calls: a token per word and per message."""

    def count_tokens_from_messages(self, messages: list[Any]) -> int:
        return sum(1 + len(str(m.get("content") or "").split()) for m in messages)


def _camel_trust(store: Store, figures: Any) -> None:
    for scope in (_SESSION, _CODER):  # a session of an agent, and the agent's own level
        store.delete_where(_TENANT, {})
        _camel_scope(store, figures, scope)
    store.delete_where(_TENANT, {})


def _camel_scope(store: Store, figures: Any, scope: Scope) -> None:
    from memcore.embedders.hashing import HashEmbedder
    from memcore.integrations.camel import CAMEL_RECORD_KEY, CamelMemory, to_camel

    embedder = HashEmbedder(dim=_DIM)
    memory = CamelMemory(store, embedder, scope, token_counter=_Words(), token_limit=4_000)
    own = [make_record(scope, f"own turn {i} about the secret plan") for i in range(3)]
    memory.memory.write_records(own)
    # Other memories' scopes: parents, a sibling agent, another user; for an agent-level memory also
    # one of the agent's sessions, which its recall may read (by design) but nothing may delete.
    recall = memory.memory.recall_scope
    strangers = [_TENANT, _ALICE, _BOB, Scope(tenant="trust", user_id="alice", agent_id="x")]
    strangers += [_SESSION] if scope == _CODER else []
    template = to_camel(own[0]).to_dict()
    crafted = []
    for i, stranger in enumerate(strangers):
        content = f"crafted {i}: the secret plan"
        # The CAMEL form claims the agent, and the id of one of its own records.
        form = {**template, "uuid": str(own[0].id), "agent_id": scope.agent_id}
        form["message"] = {**template["message"], "content": content}
        crafted.append(
            MemoryRecord(
                scope=stranger,
                message=Message(role="user", content=content),
                metadata={CAMEL_RECORD_KEY: json.dumps(form, default=str)},
            )
        )
    forged = {**template, "uuid": str(crafted[0].id), "role_at_backend": "system", "agent_id": "x"}
    forger = MemoryRecord(  # in the scope, but its CAMEL form names another record, agent and role
        scope=scope,
        message=Message(role="user", content=template["message"]["content"]),
        metadata={CAMEL_RECORD_KEY: json.dumps(forged, default=str)},
    )
    # Another session of the agent, inside the recall scope, holds a record of one of this scope's ids.
    namesake = MemoryRecord(
        id=own[1].id,
        scope=Scope(tenant="trust", user_id="alice", agent_id="coder", session_id="s2"),
        message=Message(role="user", content="crafted namesake: the secret plan"),
    )
    crafted.append(namesake)
    store.add(crafted, embedder.embed([r.message.content for r in crafted]))
    memory.memory.write_records([forger])
    mine = {r.id for r in [*own, forger]}
    unreadable = {r.message.content for r in crafted if not recall.matches(r.scope)}
    retrieved = _guarded(figures, memory.retrieve, [])
    figures["foreign_reads"] += sum(item.memory_record.message.content in unreadable for item in retrieved)
    figures["forged_ids"] += sum(
        item.memory_record.uuid not in mine
        or item.memory_record.agent_id != scope.agent_id
        or item.memory_record.role_at_backend.value != "user"
        for item in retrieved
        if not item.memory_record.message.content.startswith("crafted")
    )
    figures["own_missing"] += int(len(retrieved) < len(mine))
    messages, _ = _guarded(figures, memory.get_context, ([], 0))
    figures["foreign_reads"] += sum(str(m.get("content")) in unreadable for m in messages)
    outside_recall = [r.id for r in crafted if not recall.matches(r.scope)]
    before = _outside(store, scope)
    _guarded(figures, lambda: memory.forget(outside_recall))
    _guarded(figures, lambda: memory.remove_records_by_indices(list(range(10))))
    memory.memory.write_records(own)
    _guarded(figures, lambda: memory.pop_records(10))
    memory.memory.write_records(own)
    _guarded(figures, memory.clear)
    _guarded(figures, lambda: memory.write_records([to_camel(r) for r in own]))
    figures["foreign_deleted"] += _lost(before, store, scope)


# -- imports -------------------------------------------------------------------------------------

_ACME = Scope(tenant="acme")
_ACME_ALICE = Scope(tenant="acme", user_id="alice")
_ACME_BOB = Scope(tenant="acme", user_id="bob")
_GLOBEX = Scope(tenant="globex", user_id="carol")


def import_trust(url: str) -> Figures:
    """Crafted export files whose lines leave the scope they declare, or the one they are given.

    Each file mixes lines inside the scope with lines outside it (another tenant, a sibling user,
    the parent scope), at the start, the middle or the end: one overwrites a record already stored
    outside the scope (same id), one adds a new record there. The import is run as ``memcore
    import`` runs it (:func:`~memcore.transfer.check_entries`, then
    :func:`~memcore.transfer.import_entries`) and as one :func:`~memcore.transfer.import_entries`.

    Figures: ``accepted`` (an import with a line outside its scope did not raise),
    ``written_outside`` (a record outside the scope added or changed), ``written_before_refusal``
    (a record written although the checked import refused the file), ``untyped_errors``;
    ``cases`` counts the files tried.
    """
    figures = zeros(*IMPORT_FAILURES, "cases")
    with fresh_location(url) as location, open_store(location) as store:
        victims = [make_record(_GLOBEX, "globex's record"), make_record(_ACME_BOB, "bob's record")]
        store.add(victims, random_vectors(len(victims), dim=_DIM, seed=4))
        for declared, given, lines in _import_cases(victims):
            inside = [s for s in (declared, given) if s is not None]
            for position in range(len(lines[0]) + 1):
                records = [*lines[0][:position], *lines[1], *lines[0][position:]]
                text = _export_text(declared, records)
                figures["cases"] += 1
                _run_import(store, figures, text, given, inside, checked=True)
                _run_import(store, figures, text, given, inside, checked=False)
    return dict(figures)


def _import_cases(
    victims: list[MemoryRecord],
) -> Iterator[tuple[Scope | None, Scope | None, tuple[list[MemoryRecord], list[MemoryRecord]]]]:
    globex, bob = victims

    def changed(record: MemoryRecord) -> MemoryRecord:
        return record.model_copy(update={"message": Message(role="user", content="overwritten")})

    def fresh(scope: Scope, text: str) -> list[MemoryRecord]:
        return [make_record(scope, f"{text} {i}") for i in range(2)]

    outside_acme = [changed(globex), make_record(_GLOBEX, "new in globex")]
    yield _ACME, None, (fresh(_ACME_ALICE, "alice"), outside_acme)
    yield None, _ACME, (fresh(_ACME_ALICE, "alice"), outside_acme)
    yield _ACME, _ACME_ALICE, (fresh(_ACME_ALICE, "alice"), [changed(bob), make_record(_ACME_BOB, "new")])
    yield _ACME_ALICE, None, (fresh(_ACME_ALICE, "alice"), [make_record(_ACME, "parent"), changed(bob)])
    yield (
        _ACME_ALICE,
        _ACME,
        (fresh(_ACME_ALICE.model_copy(update={"agent_id": "a"}), "agent"), [changed(bob)]),
    )
    yield Scope(tenant="globex"), _ACME, (fresh(_ACME_ALICE, "alice"), [make_record(_GLOBEX, "declared")])


def _export_text(declared: Scope | None, records: list[MemoryRecord]) -> str:
    header = {
        "format": FORMAT,
        "scope": None if declared is None else declared.model_dump(exclude_none=True),
        "vector_space": None,
    }
    lines = [json.dumps(header)]
    lines += [json.dumps({"record": json.loads(r.model_dump_json()), "vector": None}) for r in records]
    return "\n".join(lines) + "\n"


def _run_import(
    store: Store, figures: Any, text: str, given: Scope | None, inside: list[Scope], *, checked: bool
) -> None:
    def within(record: MemoryRecord) -> bool:
        return all(scope.matches(record.scope) for scope in inside)

    before = {r.id: r for r in store.list(Scope.everything())}
    refused = True
    try:
        if checked:
            check_entries(read_export(_lines(text))[1], scope=given)
        import_entries(store, *read_export(_lines(text)), scope=given)
        figures["accepted"] += 1
        refused = False
    except MemcoreError:
        pass
    except Exception as exc:
        figures["untyped_errors"] += 1
        print(f"an import raised {exc!r}"[:500])
    after = {r.id: r for r in store.list(Scope.everything())}
    changed = [r for record_id, r in after.items() if before.get(record_id) != r]
    figures["written_outside"] += sum(not within(r) for r in changed)
    if checked and refused:
        figures["written_before_refusal"] += len(changed)
    store.delete(Scope.everything(), [r.id for r in changed if r.id not in before])


def _lines(text: str) -> Iterable[str]:
    return io.StringIO(text)
