"""Reliability scenarios of the world a deployment lives in, beyond one fresh process.

* :func:`fork`: a store object inherited by a forked worker (gunicorn ``--preload``, celery
  prefork, ``multiprocessing`` with fork), used by parent and child at once.
* :func:`permissions`: a store opened in a folder that already exists with loose modes.
* :func:`limits`: the largest record, filter and batch the contract allows, and one past each.

Like :mod:`memcore.testing.reliability`, each returns counts whose failures must be zero.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt

from memcore.errors import MemcoreError
from memcore.filters import MAX_FILTER_TERMS, evaluate, parse_filter
from memcore.plugins import open_store, store_classes, url_scheme
from memcore.records import MAX_METADATA_KEYS, MAX_METADATA_LIST_ITEMS, MemoryRecord, Message, MetadataValue
from memcore.scope import Scope
from memcore.store import Store
from memcore.testing.helpers import make_record, random_vectors
from memcore.testing.reliability import Figures, fresh_location, zeros
from memcore.validation import MAX_BATCH_RECORDS, MAX_RECORD_BYTES

_PARENT = Scope(tenant="acme", user_id="alice")
_CHILD = Scope(tenant="globex", user_id="bob")


def fork(url: str, seconds: float = 1.0, records: int = 20) -> Figures:
    """Parent and forked child read, write and delete through one inherited store object at once.

    Each side loops over ``list``, ``search`` and ``get`` of its own scope for ``seconds``; the
    child then adds a record and deletes one of its own. Every answer must hold only the caller's
    records, every failure must be a memcore error, and what the child was told it wrote or
    deleted must hold once the parent has written, purged and (a durable store) reopened.

    Figures: ``leaks`` (another scope's records returned), ``untyped_errors``, ``lost`` (an
    acknowledged write missing at the end), ``resurrected`` (an acknowledged delete back),
    ``parent_lost`` (a parent record missing), ``child_crashed``; ``child_reads`` and
    ``child_refused`` say which of the two allowed behaviours the child showed.
    """
    figures = zeros("leaks", "untyped_errors", "lost", "resurrected", "parent_lost", "child_crashed")
    parent_records = [make_record(_PARENT, f"alice-{i}") for i in range(records)]
    child_records = [make_record(_CHILD, f"bob-{i}") for i in range(records)]
    vectors = random_vectors(2 * records, seed=11)
    with fresh_location(url) as location:
        store = open_store(location)
        try:
            store.add(parent_records + child_records, vectors)
            everyone = [record.id for record in parent_records + child_records]
            read_end, write_end = os.pipe()
            child = os.fork()
            if child == 0:  # pragma: no cover - runs in the child, which never returns
                _child(store, child_records, everyone, vectors[records:], seconds, write_end)
            os.close(write_end)
            own = _loop(store, _PARENT, parent_records, everyone, vectors[:records], seconds)
            report = _read_all(read_end)
            _, status = os.waitpid(child, 0)
            figures["child_crashed"] += int(not report or status != 0)
            seen = json.loads(report) if report else {}
            for name in ("leaks", "untyped_errors"):
                figures[name] += own[name] + seen.get(name, 0)
            figures["child_reads"] += seen.get("reads", 0)
            figures["child_refused"] += seen.get("refused", 0)
            late = make_record(_PARENT, "alice-late")
            store.add([late], vectors[:1])
            store.purge()
            if store.capabilities.durable:
                store.close()
                store = open_store(location)
            _check_outcome(store, figures, [*parent_records, late], seen)
        finally:
            store.close()
    return dict(figures)


def _child(
    store: Store,
    own: list[MemoryRecord],
    everyone: list[UUID],
    vectors: npt.NDArray[np.float32],
    seconds: float,
    out: int,
) -> None:  # pragma: no cover - runs in the forked child
    status = 1
    try:
        figures = _loop(store, _CHILD, own, everyone, vectors, seconds)
        written, deleted = make_record(_CHILD, "bob-late"), own[0]
        acknowledged: dict[str, list[str]] = {"written": [], "deleted": []}
        try:
            store.add([written], vectors[:1])
            acknowledged["written"].append(str(written.id))
            if store.delete(_CHILD, [deleted.id]) == 1:
                acknowledged["deleted"].append(str(deleted.id))
        except MemcoreError:
            figures["refused"] = 1
        except Exception:
            figures["untyped_errors"] += 1
        store.close()
        os.write(out, json.dumps({**figures, **acknowledged}).encode())
        status = 0
    finally:
        os._exit(status)


def _loop(
    store: Store,
    scope: Scope,
    own: list[MemoryRecord],
    everyone: list[UUID],
    vectors: npt.NDArray[np.float32],
    seconds: float,
) -> Counter[str]:
    """Scoped reads (``get`` asks for both sides' ids) until ``seconds`` pass or the store
    refuses (a typed error, once)."""
    figures: Counter[str] = zeros("leaks", "untyped_errors", "reads", "refused")
    mine = {record.id for record in own}
    deadline = time.monotonic() + seconds
    step = 0
    while time.monotonic() < deadline:
        step += 1
        try:
            found: list[UUID] = [r.id for r in store.list(scope, limit=len(own))]
            found += [h.record.id for h in store.search(scope, vector=vectors[step % len(own)], limit=10)]
            found += [r.id for r in store.get(scope, everyone)]
        except MemcoreError:
            figures["refused"] = 1
            break
        except Exception:
            figures["untyped_errors"] += 1
            continue
        figures["leaks"] += sum(record_id not in mine for record_id in found)
        figures["reads"] += 1
    return figures


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode()


def _check_outcome(
    store: Store, figures: Counter[str], parent: list[MemoryRecord], seen: dict[str, list[str]]
) -> None:
    figures["parent_lost"] += len(parent) - len(store.get(_PARENT, [r.id for r in parent]))
    written = [UUID(i) for i in seen.get("written", [])]
    deleted = [UUID(i) for i in seen.get("deleted", [])]
    figures["lost"] += len(written) - len(store.get(_CHILD, written))
    figures["resurrected"] += len(store.get(_CHILD, deleted))


# -- permissions ---------------------------------------------------------------------------------


def permissions(url: str) -> Figures:
    """Open a store in a folder made beforehand with mode 0755 (files inside 0644), write, close.

    Figures: ``readable_by_others`` (files or folders under it that another local user could
    read or enter: any group or other permission bit, on the folder itself or anything in it).
    A store without a folder (a server, ``memory://``) has nothing to check and reports zero.
    """
    figures = zeros("readable_by_others")
    with fresh_location(url) as location:
        capabilities = store_classes()[url_scheme(location)].store_class.capabilities
        if not capabilities.durable or capabilities.server:
            return dict(figures)
        folder = Path(location.partition("://")[2].split("?")[0])
        folder.mkdir(mode=0o755, parents=True)
        os.chmod(folder, 0o755)  # mkdir's mode is masked by the umask; make it loose for sure
        with open_store(location) as store:
            store.add([make_record(_PARENT, "private")], random_vectors(1))
        for path in [folder, *folder.rglob("*")]:
            if not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) & 0o077:
                figures["readable_by_others"] += 1
    return dict(figures)


# -- limits --------------------------------------------------------------------------------------


def limits(url: str) -> Figures:
    """The largest record, filter and batch the contract allows, and one past each.

    Within the limits everything is stored and read back exactly, and the largest filter selects
    what the reference evaluator selects on every read path; past them every call raises a
    memcore error and stores nothing. Afterwards another tenant still writes and reads.

    Figures: ``rejected_within`` (a call within the limits failed), ``accepted_past`` (a call past
    them succeeded), ``untyped_errors``, ``wrong_results``, ``unusable_after``.
    """
    figures = zeros("rejected_within", "accepted_past", "untyped_errors", "wrong_results", "unusable_after")
    scope = Scope(tenant="limits", user_id="u")
    with fresh_location(url) as location, open_store(location) as store:
        for name, within, past in _limit_cases(scope):
            try:
                within(store)
            except Exception as exc:
                figures["rejected_within"] += 1
                figures["untyped_errors"] += int(not isinstance(exc, MemcoreError))
                print(f"{name}: within the limit failed: {exc!r}"[:500])
            try:
                past(store)
                figures["accepted_past"] += 1
                print(f"{name}: past the limit accepted")
            except MemcoreError:
                pass
            except Exception as exc:
                figures["untyped_errors"] += 1
                print(f"{name}: past the limit raised {exc!r}"[:500])
        figures["wrong_results"] += _largest_filter(store, scope)
        other = Scope(tenant="bystander", user_id="v")
        try:
            record = make_record(other, "still here")
            store.add([record], random_vectors(1))
            figures["unusable_after"] += int(store.get(other, [record.id]) != [record])
            figures["unusable_after"] += int(len(store.search(other, vector=random_vectors(1)[0])) != 1)
        except Exception as exc:
            figures["unusable_after"] += 1
            print(f"a bystander's write or read failed afterwards: {exc!r}"[:500])
    return dict(figures)


def _limit_cases(scope: Scope) -> list[tuple[str, Callable[[Store], None], Callable[[Store], None]]]:
    def widest(keys: int, items: int) -> Callable[[Store], None]:
        def write(store: Store) -> None:
            metadata: dict[str, MetadataValue] = {f"k{i:03d}": f"v{i}" for i in range(keys - 1)}
            metadata["tags"] = [f"t{i}" for i in range(items)]
            record = make_record(scope, "wide", metadata=metadata)
            store.add([record], random_vectors(1))
            _read_back(store, scope, record)

        return write

    def longest(extra: int) -> Callable[[Store], None]:
        def write(store: Store) -> None:
            record = make_record(scope, "")
            overhead = len(record.model_dump_json().encode())
            record = record.model_copy(
                update={"message": Message(role="user", content="x" * (MAX_RECORD_BYTES - overhead + extra))}
            )
            store.add([record], random_vectors(1))
            _read_back(store, scope, record)

        return write

    def batch(count: int) -> Callable[[Store], None]:
        def write(store: Store) -> None:
            records = [make_record(scope, f"batch-{i}", kind="batch") for i in range(count)]
            before = store.count(scope, filter={"kind": "batch"})
            try:
                store.add(records, random_vectors(count, seed=5))
            finally:
                stored = store.count(scope, filter={"kind": "batch"}) - before
                if stored not in (0, count):
                    raise AssertionError(f"{stored} of a batch of {count} were stored")
            if stored != count:
                raise AssertionError("a batch was acknowledged but not stored")

        return write

    def filtered(terms: int) -> Callable[[Store], None]:
        def read(store: Store) -> None:
            store.count(scope, filter={"metadata.n": {"$in": list(range(terms))}})

        return read

    return [
        (
            "metadata keys",
            widest(MAX_METADATA_KEYS, MAX_METADATA_LIST_ITEMS),
            widest(MAX_METADATA_KEYS + 1, 1),
        ),
        ("list items", widest(2, MAX_METADATA_LIST_ITEMS), widest(2, MAX_METADATA_LIST_ITEMS + 1)),
        ("record bytes", longest(0), longest(1)),
        ("batch records", batch(MAX_BATCH_RECORDS), batch(MAX_BATCH_RECORDS + 1)),
        ("filter terms", filtered(MAX_FILTER_TERMS), filtered(MAX_FILTER_TERMS + 1)),
    ]


def _read_back(store: Store, scope: Scope, record: MemoryRecord) -> None:
    if store.get(scope, [record.id]) != [record]:
        raise AssertionError(f"record {record.id} did not read back as written")


_FILTER_RECORDS = 2 * MAX_FILTER_TERMS


def _largest_filter(store: Store, scope: Scope) -> int:
    """How many read paths disagree with the reference evaluator on filters of the most terms."""
    scope = scope.model_copy(update={"user_id": "filters"})
    records = [
        make_record(scope, f"n-{i}", metadata={"n": i, "tag": f"t{i % 7}"}) for i in range(_FILTER_RECORDS)
    ]
    vectors = random_vectors(_FILTER_RECORDS, seed=9)
    store.add(records, vectors)
    rng = np.random.default_rng(3)
    chosen = [int(n) for n in rng.choice(_FILTER_RECORDS, size=MAX_FILTER_TERMS - 1, replace=False)]
    specs: list[dict[str, Any]] = [
        {"metadata.n": {"$in": [*chosen, _FILTER_RECORDS + 5]}},
        {"metadata.n": {"$nin": [*chosen, -1]}},
        {"$or": [{"metadata.n": {"$in": chosen[:-1]}}, {"metadata.tag": "t3"}]},
    ]
    wrong = 0
    for spec in specs:
        node = parse_filter(spec)
        expected = {record.id for record in records if node is not None and evaluate(node, record)}
        wrong += int({r.id for r in store.list(scope, filter=spec)} != expected)
        wrong += int(store.count(scope, filter=spec) != len(expected))
        hits = store.search(scope, vector=vectors[chosen[0]], filter=spec, limit=20)
        wrong += int(not {h.record.id for h in hits} <= expected or len(hits) != min(20, len(expected)))
    victims = {record.id for record in records if record.metadata["n"] in set(chosen)}
    wrong += int(store.delete_where(scope, specs[0]) != len(victims))
    wrong += int(store.count(scope) != _FILTER_RECORDS - len(victims))
    return wrong
