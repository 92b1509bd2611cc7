"""Reliability scenarios that count failures: isolation, bad input, erasure, concurrency, locks.

Each scenario opens the store a URL names (``{tmp}`` becomes a fresh folder), runs
as many trials as asked and returns its figures as counts. The tests in
``tests/reliability`` and in each plugin run them with small counts and assert
that every failure count is zero; ``benchmarks/reliability.py`` runs them with
large counts and prints the figures ``RELIABILITY.md`` reports. Crashes, which
need a writer process to kill, are in :mod:`memcore.testing.crash`.

Failure counts are named so that zero is the only acceptable value:
``leaks``, ``untyped_errors``, ``accepted``, ``lost``, ``found_after_delete``...
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import math
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from memcore.bench.workloads import fresh
from memcore.errors import FilterError, MemcoreError, StoreLockedError
from memcore.filters import evaluate, parse_filter
from memcore.plugins import open_store
from memcore.records import MemoryRecord, Message
from memcore.scope import SCOPE_FIELDS, Scope
from memcore.store import Store, system_clock
from memcore.testing.helpers import DIM, make_record, random_vectors, snapshot
from memcore.testing.strategies import filters, record_fields
from memcore.validation import Matrix, normalize_rows

Figures = dict[str, int]


@contextlib.contextmanager
def fresh_location(url: str) -> Iterator[str]:
    """``url`` with ``{tmp}`` replaced by a new temporary folder (removed afterwards), ``{name}`` by
    a new table or collection name (see :func:`memcore.bench.workloads.fresh`)."""
    with tempfile.TemporaryDirectory(prefix="memcore-reliability-") as folder:
        yield fresh(url, folder + "/store")


def zeros(*names: str) -> Counter[str]:
    """Figures that start at zero, so that a zero is reported rather than left out."""
    return Counter(dict.fromkeys(names, 0))


def _trials(examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings for a scenario: ``examples`` generated cases, reproducible, no shrinking."""
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


# -- isolation -----------------------------------------------------------------------------------

_scope_cells = st.tuples(
    st.sampled_from([0, 1]),  # which of the trial's two tenants
    st.sampled_from([None, "u1", "u2"]),
    st.sampled_from([None, "a1", "a2"]),
    st.sampled_from([None, "s1", "s2"]),
)
_smuggled = st.sampled_from(
    [{name: "u1"} for name in SCOPE_FIELDS]
    + [{f"scope.{name}": "u1"} for name in SCOPE_FIELDS]
    + [{"$or": [{"tenant": "x"}, {"role": "user"}]}, {"$not": {"user_id": "u1"}}, {"metadata.a": {"$ne": 1}}]
)


def _scope(trial: int, cell: tuple[int, str | None, str | None, str | None]) -> Scope:
    tenant, user_id, agent_id, session_id = cell
    return Scope(tenant=f"iso{trial}-{tenant}", user_id=user_id, agent_id=agent_id, session_id=session_id)


def isolation(url: str, examples: int) -> Figures:
    """Random scopes, records and filter trees; every read and delete path is checked for leaks.

    Each example writes records under scopes of two tenants of its own, some of them
    with the id of a record of another scope (a record is its exact scope and id:
    neither may overwrite, hide or answer for the other), then reads through a
    random scope, with and without a random filter, by ``list`` (whole, limited,
    ordered, before and after a time), ``count``, ``get``, ``vectors``, vector,
    keyword and text ``search``, ``delete`` by id and ``delete_where``, and
    compares with the reference (scope match, then :func:`memcore.filters.evaluate`).
    A record of another scope returned, counted or deleted is a leak. A filter
    naming a scope field must be refused.
    """
    figures = zeros("examples", "leaks", "accepted")
    numbers = itertools.count()
    with fresh_location(url) as location, open_store(location) as store:

        @_trials(examples)
        @given(
            layout=st.lists(
                st.tuples(_scope_cells, record_fields(), st.none() | st.integers(0, 6)),
                min_size=1,
                max_size=8,
            ),
            reader=_scope_cells,
            spec=filters(max_leaves=4),
            smuggled=_smuggled,
        )
        def trial(
            layout: list[tuple[Any, dict[str, Any], int | None]],
            reader: Any,
            spec: dict[str, Any],
            smuggled: dict[str, Any],
        ) -> None:
            number = next(numbers)
            records: list[MemoryRecord] = []
            for i, (cell, fields, reused) in enumerate(layout):
                record = make_record(_scope(number, cell), f"shared words {i}", **fields)
                if reused is not None and reused < i:
                    taken = {_key(r) for r in records}
                    if (record.scope.as_tuple(), records[reused].id) not in taken:
                        record = record.model_copy(update={"id": records[reused].id})
                records.append(record)
            vectors = random_vectors(len(records), seed=number)
            store.add(records, vectors)
            figures["examples"] += 1
            figures["leaks"] += _leaks(
                store, _scope(number, reader), parse_filter(spec), spec, records, vectors
            )
            figures["accepted"] += _accepts(store, _scope(number, reader), smuggled)

        trial()
    return dict(figures)


Key = tuple[tuple[str | None, ...], UUID]


def _key(record: MemoryRecord) -> Key:
    return record.scope.as_tuple(), record.id


def _leaks(
    store: Store,
    reader: Scope,
    node: Any,
    spec: dict[str, Any],
    records: list[MemoryRecord],
    vectors: Matrix,
) -> int:
    """Records of another scope (or not matching the filter) that any read or delete path let through.

    Records are told apart by exact scope and id, since two scopes may use one id.
    """
    visible = {_key(r) for r in records if reader.matches(r.scope)}
    wanted = {_key(r) for r in records if _key(r) in visible and evaluate(node, r)}
    every = [r.id for r in records]
    query = random_vectors(1, seed=len(records))[0]
    middle = sorted(r.created_at for r in records)[len(records) // 2]
    found: list[tuple[set[Key], set[Key]]] = [
        ({_key(r) for r in store.list(reader)}, visible),
        ({_key(r) for r in store.list(reader, filter=spec)}, wanted),
        ({_key(r) for r in store.list(reader, order="desc", limit=3)}, visible),
        ({_key(r) for r in store.list(reader, filter=spec, after=middle)}, wanted),
        ({_key(r) for r in store.list(reader, before=middle, limit=5)}, visible),
        ({_key(r) for r in store.get(reader, every)}, visible),
        ({_key(h.record) for h in store.search(reader, vector=query, limit=50)}, visible),
        ({_key(h.record) for h in store.search(reader, vector=query, filter=spec, limit=50)}, wanted),
        ({_key(h.record) for h in store.search(reader, keywords="shared words", limit=50)}, visible),
    ]
    if store.capabilities.text_search:
        found.append(({_key(h.record) for h in store.search(reader, text="shared", limit=50)}, visible))
        found.append(({_key(h.record) for h in store.search(reader, text="words", filter=spec)}, wanted))
    leaks = sum(len(returned - allowed) for returned, allowed in found)
    leaks += max(0, store.count(reader) - len(visible))
    leaks += max(0, store.count(reader, filter=spec) - len(wanted))
    leaks += _foreign_vectors(store, reader, records, vectors)
    outsiders = [r for r in records if _key(r) not in visible]
    # Deleting by an outsider's id may delete the reader's own record of that id, nothing else.
    shared = sum(1 for key in visible if key[1] in {r.id for r in outsiders})
    leaks += max(0, store.delete(reader, [r.id for r in outsiders]) - shared)
    leaks += max(0, store.delete_where(reader, spec) - len(wanted))
    survivors = {_key(r) for r in store.get(Scope.everything(), [r.id for r in outsiders])}
    return leaks + sum(1 for r in outsiders if _key(r) not in survivors)


def _foreign_vectors(store: Store, reader: Scope, records: list[MemoryRecord], vectors: Matrix) -> int:
    """Vectors ``reader`` was given by id that are not those of its own record of that id.

    An id ``reader`` sees in several scopes is left out: ``vectors`` refuses it
    (:class:`~memcore.errors.AmbiguousIdError`), as the contract says.
    """
    rows = normalize_rows(vectors)
    leaks = 0
    for record_id in dict.fromkeys(r.id for r in records):
        mine = [row for row, r in enumerate(records) if r.id == record_id and reader.matches(r.scope)]
        if len(mine) > 1:
            continue
        given_back = store.vectors(reader, [record_id])
        if not mine:
            leaks += len(given_back)
        elif record_id not in given_back or not np.allclose(given_back[record_id], rows[mine[0]], atol=1e-5):
            leaks += 1
    return leaks


def _accepts(store: Store, reader: Scope, smuggled: dict[str, Any]) -> int:
    """1 if a filter that names a scope field (or is otherwise invalid) was accepted."""
    expected_valid = "metadata.a" in smuggled
    try:
        store.count(reader, filter=smuggled)
    except FilterError:
        return int(expected_valid)
    return int(not expected_valid)


# -- bad input -----------------------------------------------------------------------------------

_bad_floats = st.sampled_from([math.nan, math.inf, -math.inf, 1e39, -1e39])
_bad_calls = st.one_of(
    st.tuples(st.just("nan-or-overflow"), st.lists(_bad_floats, min_size=1, max_size=DIM)),
    st.tuples(st.just("dimension"), st.integers(0, 3 * DIM).filter(lambda n: n != DIM)),
    st.tuples(st.just("zero-vector"), st.just(0)),
    st.tuples(st.just("content"), st.sampled_from([0, 1 << 20, 2 << 20])),
    st.tuples(st.just("metadata-int"), st.sampled_from([2**63, -(2**63) - 1, 10**30])),
    st.tuples(st.just("metadata-key"), st.sampled_from(["", "a b", "../x", "x" * 65, "é"])),
    st.tuples(st.just("id"), st.sampled_from(["", "1", "not-a-uuid", "0" * 33, "{}", "\x00"])),
    st.tuples(st.just("scope"), st.sampled_from(["", ".", "..", "a/b", "a\\b", "x" * 129, "ü", "a b", "\n"])),
    st.tuples(
        st.just("filter"),
        st.sampled_from(
            [
                {"metadata.a": {"$regex": "x"}},
                {"$where": "1"},
                {"metadata.a": {"$gt": "1"}},
                {"$or": []},
                {"metadata": 1},
                {"metadata.a": {"$in": "x"}},
                {"role": {"$gt": "user"}},
                {"$and": [{"$not": []}]},
                {"metadata.a": {"$eq": float("nan")}},
                {"metadata.a": {"$eq": 2**64}},
            ]
        ),
    ),
    st.tuples(st.just("limit"), st.sampled_from([0, -1, 10**9, True, 1.5])),
    st.tuples(st.just("duplicate-ids"), st.just(2)),
)


def _bad_call(store: Store, kind: str, value: Any, scope: Scope) -> None:
    good = random_vectors(1, seed=7)[0].tolist()
    if kind == "nan-or-overflow":
        store.add([make_record(scope, "bad")], [[*value, *good[len(value) :]]])
    elif kind == "dimension":
        store.add([make_record(scope, "bad")], [[0.5] * value])
    elif kind == "zero-vector":
        store.add([make_record(scope, "bad")], [[0.0] * DIM])
    elif kind == "content":
        store.add([make_record(scope, "x" * value if value else "")], [good])
        if value:  # oversized must be refused; empty content is a valid message
            return
        raise _AllowedError
    elif kind == "metadata-int":
        store.add(
            [MemoryRecord(scope=scope, message=Message(role="user", content="x"), metadata={"n": value})]
        )
    elif kind == "metadata-key":
        store.add([MemoryRecord(scope=scope, message=Message(role="user", content="x"), metadata={value: 1})])
    elif kind == "id":
        store.get(scope, [value])
    elif kind == "scope":
        store.count(Scope(tenant=value))
    elif kind == "filter":
        store.list(scope, filter=value)
    elif kind == "limit":
        store.search(scope, vector=good, limit=value)
    else:
        record = make_record(scope, "twice")
        again = record.model_copy(update={"message": Message(role="user", content="again")})
        store.add([record, again], [good, good])


class _AllowedError(Exception):
    """Raised by a call that was allowed to succeed (so it is not counted as accepting bad input)."""


def bad_input(url: str, examples: int) -> Figures:
    """Random bad input; only :mod:`memcore.errors` exceptions, nothing bad accepted, nothing lost."""
    figures = zeros("examples", "untyped_errors", "accepted", "lost")
    with fresh_location(url) as location, open_store(location) as store:
        scope = Scope(tenant="kept")
        kept = [make_record(scope, f"kept {i}", metadata={"i": i}) for i in range(5)]
        store.add(kept, random_vectors(5))
        before = snapshot(store)

        @_trials(examples)
        @given(call=_bad_calls)
        def trial(call: tuple[str, Any]) -> None:
            figures["examples"] += 1
            try:
                _bad_call(store, *call, scope)
            except _AllowedError:
                return
            except MemcoreError:
                return
            except Exception:
                figures["untyped_errors"] += 1
                return
            figures["accepted"] += 1

        trial()
        figures["lost"] = len(before) - sum(1 for row in snapshot(store) if row in before)
    return dict(figures)


# -- erasure -------------------------------------------------------------------------------------


def erasure(url: str, records: int, deletions: int, seed: int = 0) -> Figures:
    """Delete random records by UUID, let as many others expire (on a store with expiry), and
    replace the content of as many more by ``update``; no deleted or expired record may be
    readable before or after reopening, and after ``purge()`` no file may hold anything of them
    (content, id, or its vector's bytes, raw or base64) nor any replaced content. A store that is
    not durable is not reopened."""
    rng = np.random.default_rng(seed)
    scope = Scope(tenant="erasure", user_id="u")
    written = [make_record(scope, f"secret-{uuid4().hex}", metadata={"n": i}) for i in range(records)]
    vectors = random_vectors(records, seed=seed)
    chosen = [written[int(i)] for i in rng.choice(records, size=3 * deletions, replace=False)]
    victims, expiring, updated = (
        chosen[:deletions],
        chosen[deletions : 2 * deletions],
        chosen[2 * deletions :],
    )
    figures = zeros(
        "found_after_delete",
        "found_after_reopen",
        "survivors_lost",
        "delete_returned_other_than_1",
        "bytes_on_disk_after_purge",
        "replaced_content_on_disk_after_purge",
    )
    figures["deleted"] = len(victims)
    with fresh_location(url) as location:
        store = open_store(location)
        try:
            gone, kept = list(victims), set[UUID]()
            if store.capabilities.expiry:
                # Written a day in the past with a minute to live: expired for every store
                # object, this one and the reopened one, whose clock is the wall clock.
                past = datetime.now(UTC) - timedelta(days=1)
                store.clock = lambda: past
                kept = {r.id for r in expiring}
                rows = [i for i, r in enumerate(written) if r.id in kept]
                store.add([written[i] for i in rows], vectors[rows], ttl=60)
                store.clock = system_clock
                gone += expiring
            rows = [i for i, r in enumerate(written) if r.id not in kept]
            store.add([written[i] for i in rows], vectors[rows])
            for record in updated:
                store.update(scope, record.id, content=f"replaced-{uuid4().hex}")
            for victim in victims:
                figures["delete_returned_other_than_1"] += int(store.delete(scope, [victim.id]) != 1)
            figures["found_after_delete"] += _readable(store, scope, gone, vectors, written)
            if store.capabilities.durable:
                store.close()
                store = open_store(location)
                figures["found_after_reopen"] += _readable(store, scope, gone, vectors, written)
            store.purge()
            figures["survivors_lost"] += records - len(gone) - store.count(scope)
        finally:
            store.close()
        path = _folder(location)
        if path is not None:
            figures["bytes_on_disk_after_purge"] += _on_disk(path, gone, vectors, written)
            figures["replaced_content_on_disk_after_purge"] += _on_disk(path, updated, None, written)
    return dict(figures)


def _readable(
    store: Store, scope: Scope, victims: list[MemoryRecord], vectors: Any, written: list[MemoryRecord]
) -> int:
    gone = {v.id for v in victims}
    rows = {r.id: i for i, r in enumerate(written)}
    found = len(store.get(scope, list(gone))) + len(store.vectors(scope, list(gone)))
    found += sum(r.id in gone for r in store.list(scope))
    for victim in victims[:20]:
        hits = store.search(scope, vector=vectors[rows[victim.id]], limit=5)
        found += sum(h.record.id in gone for h in hits)
        if store.capabilities.text_search:
            found += sum(h.record.id in gone for h in store.search(scope, text=victim.message.content))
        found += store.count(scope, filter={"metadata.n": rows[victim.id]})
    return found


def _folder(location: str) -> Path | None:
    """The folder of an embedded store's URL (``jsonl:///tmp/x``), ``None`` for one without."""
    path = location.partition("://")[2].split("?")[0]
    return Path(path) if path and Path(path).is_dir() else None


def _on_disk(folder: Path, victims: list[MemoryRecord], vectors: Any, written: list[MemoryRecord]) -> int:
    """How many needles (content, id, vector bytes) of deleted records any file still holds; with
    ``vectors`` ``None``, how many of the records' (replaced) contents."""
    rows = {r.id: i for i, r in enumerate(written)}
    needles: list[bytes] = []
    for victim in victims:
        if vectors is None:  # the record lives on: only its old content must be gone
            needles.append(victim.message.content.encode())
            continue
        needles += [victim.message.content.encode(), str(victim.id).encode()]
        vector = np.asarray(vectors[rows[victim.id]], dtype="<f4")
        for form in (vector.tobytes(), normalize_rows(vector[None, :])[0].astype("<f4").tobytes()):
            needles += [form, base64.b64encode(form)]
    assert all(needle.strip(b"\0") for needle in needles), "a needle of zeros would be missed"
    found, longest = 0, max(map(len, needles), default=0)
    for file in folder.rglob("*"):
        if file.is_file():
            data = _written_span(file.read_bytes(), longest)
            found += sum(needle in data for needle in needles)
    return found


def _written_span(data: bytes, margin: int) -> bytes:
    """``data`` from ``margin`` bytes before its first non-zero byte to ``margin`` after its last.

    A needle holding a non-zero byte cannot lie outside it, and the search skips the zeros that
    preallocated files (Qdrant's mmap pages and WAL segments) are mostly made of.
    """
    written = np.frombuffer(data, dtype=np.uint8) != 0
    if not written.any():
        return b""
    first, last = int(written.argmax()), len(data) - 1 - int(written[::-1].argmax())
    return data[max(0, first - margin) : last + margin + 1]


# -- concurrency and locks -----------------------------------------------------------------------


def concurrency(url: str, threads: int, writes: int) -> Figures:
    """``threads`` writers of ``writes`` single-record adds each, with a reader running alongside."""
    figures = zeros("writes", "reads", "lost", "not_acknowledged", "typed_errors", "untyped_errors")
    lock = threading.Lock()
    with fresh_location(url) as location, open_store(location) as store:
        done = threading.Event()
        vectors = random_vectors(writes, seed=3)
        written: list[list[UUID]] = [[] for _ in range(threads)]

        def count(name: str) -> None:
            with lock:
                figures[name] += 1

        def write(thread: int) -> None:
            scope = Scope(tenant="busy", user_id=f"w{thread}")
            for i in range(writes):
                record = make_record(scope, f"{thread}-{i}")
                try:
                    store.add([record], vectors[i : i + 1])
                    written[thread].append(record.id)
                except MemcoreError:
                    count("typed_errors")
                except Exception:
                    count("untyped_errors")

        def read() -> None:
            scope = Scope(tenant="busy")
            while not done.is_set():
                try:
                    store.search(scope, vector=vectors[0], limit=10)
                    store.list(scope, order="desc", limit=20)
                    count("reads")
                except Exception:
                    count("untyped_errors")

        reader = threading.Thread(target=read)
        reader.start()
        workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        done.set()
        reader.join()
        acknowledged = {i for ids in written for i in ids}
        figures["writes"] = threads * writes
        figures["lost"] = len(acknowledged) - len(store.get(Scope(tenant="busy"), list(acknowledged)))
        figures["not_acknowledged"] = threads * writes - len(acknowledged)
    return dict(figures)


def second_opener(url: str) -> Figures:
    """A second open of a durable location in this process works or fails typed; never silently
    corrupts. (A second *process* is in :mod:`memcore.testing.crash`.)"""
    figures = zeros("lost", "untyped_errors")
    with fresh_location(url) as location, open_store(location) as first:
        record = make_record(Scope(tenant="locks"), "first")
        first.add([record], random_vectors(1))
        try:
            with open_store(location) as second:
                figures["second_open_shared"] += 1
                figures["lost"] += int(second.get(Scope(tenant="locks"), [record.id]) != [record])
        except StoreLockedError:
            figures["second_open_refused"] += 1
        except MemcoreError:
            figures["second_open_other_typed_error"] += 1
        except Exception:
            figures["untyped_errors"] += 1
    return dict(figures)
