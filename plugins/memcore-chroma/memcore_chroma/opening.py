"""Find, create and check a store's collection, and what its metadata keeps.

The collection's metadata keeps the layout's format (:data:`FORMAT`; a collection of
:data:`FORMAT_1` or :data:`FORMAT_2` is migrated when a store opens it), the vector dimension
(``memcore.dimension``, fixed by the first vector or by ``?dimension=``), the
dimension of what its index holds (``memcore.index_dimension``: the stand-in
vectors of records without one are written in it before the first real vector
fixes the dimension) and the bound embedder. Stores re-read it before every
decision that depends on it: other stores, in this process or another, may
have changed it since.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.collection_configuration import CreateCollectionConfiguration
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Metadata
from chromadb.errors import NotFoundError

from memcore.errors import DimensionMismatchError, InvalidInputError, StoreCorruptedError
from memcore.records import NEVER_EXPIRES, epoch_micros
from memcore_chroma.encoding import (
    EXPIRES_AT_KEY,
    RECORD_ID_KEY,
    SCOPE_KEY,
    VECTOR_KEY,
    decode,
    entry_id,
    scope_key,
    stored_scope,
)

FORMAT = "memcore-chroma/3"
"""Entries named by :func:`~memcore_chroma.encoding.entry_id`, with their record's id in
:data:`~memcore_chroma.encoding.RECORD_ID_KEY`, each with its
:data:`~memcore_chroma.encoding.EXPIRES_AT_KEY`."""
FORMAT_2 = "memcore-chroma/2"
"""The format before records could expire: entries without
:data:`~memcore_chroma.encoding.EXPIRES_AT_KEY` (:func:`backfill_expiry` gives it to them)."""
FORMAT_1 = "memcore-chroma/1"
"""The format before records were (exact scope, id): entries named by their record's id alone."""
FORMATS = (FORMAT, FORMAT_2, FORMAT_1)
"""The formats a store opens: the older ones are migrated to :data:`FORMAT` (:func:`migrate`)."""
META_FORMAT = "memcore.format"
META_DIMENSION = "memcore.dimension"
META_INDEX_DIMENSION = "memcore.index_dimension"
META_EMBEDDER = "memcore.embedder"
META_SCOPE_KEYS = "memcore.scope_keys"
"""Set once every entry has its ``scope.key`` (:data:`~memcore_chroma.encoding.SCOPE_KEY`)."""
META_STAND_INS = "memcore.stand_ins"
"""Whether the collection may hold stand-in vectors (records without a vector): only then do
searches send ``vec: true`` to Chroma, a clause that matches every other entry and so costs a
scan of the collection. Set before the first stand-in is written; a search still checks each
hit's ``vec`` (:func:`holds_stand_ins` sets it for a collection written before the key)."""
BACKFILL_PAGE = 1_000
DEFAULT_COLLECTION = "memcore"
REBUILD_SUFFIX = ".rebuild"
MAX_NAME = 512
MAX_EF_SEARCH = 10_000
"""The largest ``ef_search`` accepted, against typos (Chroma's default is 100; the README's
benchmark section has recall at other settings)."""

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_IPV4 = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")

Meta = dict[str, Any]


def check_collection_name(name: str) -> str:
    """Check a collection name against Chroma's rules (leaving room for the rebuild suffix).

    Chroma wants 3-512 characters of ``[A-Za-z0-9._-]``, starting and ending
    with a letter or digit, without ``..``, and not an IPv4 address.

    :raises InvalidInputError: if Chroma would refuse it.
    """
    ok = (
        isinstance(name, str)
        and 3 <= len(name) <= MAX_NAME - len(REBUILD_SUFFIX)
        and name.isascii()
        and _NAME.fullmatch(name) is not None
        and ".." not in name
        and _IPV4.fullmatch(name) is None
    )
    if not ok:
        raise InvalidInputError(
            f"invalid Chroma collection name {name!r}: use 3-504 characters of [A-Za-z0-9._-], "
            "starting and ending with a letter or digit, without '..', and not an IPv4 address"
        )
    return name


def check_ef_search(ef_search: int | None) -> int | None:
    """Check an ``ef_search`` setting and return it.

    :raises InvalidInputError: unless it is ``None`` or an int from 1 to :data:`MAX_EF_SEARCH`.
    """
    if ef_search is not None and (
        not isinstance(ef_search, int) or isinstance(ef_search, bool) or not 1 <= ef_search <= MAX_EF_SEARCH
    ):
        raise InvalidInputError(f"ef_search must be an integer from 1 to {MAX_EF_SEARCH}, got {ef_search!r}")
    return ef_search


def configuration(ef_search: int | None) -> CreateCollectionConfiguration:
    """A new collection's configuration: cosine space, and ``ef_search`` if given (else Chroma's default)."""
    if ef_search is None:
        return {"hnsw": {"space": "cosine"}}
    return {"hnsw": {"space": "cosine", "ef_search": ef_search}}


def ef_search_of(collection: Collection) -> int | None:
    """The ``ef_search`` a collection's HNSW index is configured with, if it says."""
    hnsw = (collection.configuration_json or {}).get("hnsw") or {}
    value = hnsw.get("ef_search")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def find(client: ClientAPI, name: str) -> Collection | None:
    """The collection called ``name``, or ``None``."""
    try:
        return client.get_collection(name, embedding_function=None)
    except NotFoundError:
        return None


def open_collection(
    client: ClientAPI, name: str, *, create: bool, ef_search: int | None = None
) -> Collection:
    """The collection ``name``, finishing or undoing a rebuild that was interrupted.

    :param create: create the collection if it does not exist.
    :param ef_search: the ``ef_search`` of a collection this creates.
    :raises NotFoundError: if it does not exist and ``create`` is false.
    """
    main, leftover = find(client, name), find(client, name + REBUILD_SUFFIX)
    if leftover is not None:
        if main is None:  # a rebuild copied everything, dropped the old one, then stopped
            leftover.modify(name=name)
            return client.get_collection(name, embedding_function=None)
        client.delete_collection(leftover.name)  # a rebuild stopped half-way: the original is intact
    if main is not None:
        return main
    if not create:
        raise NotFoundError(f"Collection [{name}] does not exist")
    return client.get_or_create_collection(
        name,
        configuration=configuration(ef_search),
        metadata={META_FORMAT: FORMAT, META_SCOPE_KEYS: True},
        embedding_function=None,
    )


def checked_metadata(collection: Collection, name: str, dimension: int | None) -> Meta:
    """The metadata ``collection`` should have, after checking that memcore can use it.

    :raises InvalidInputError: if memcore did not write its entries, or it is not cosine.
    :raises StoreCorruptedError: if it is in none of the :data:`FORMATS` (:func:`migrate` then
        upgrades an older one).
    :raises DimensionMismatchError: if it holds vectors of another dimension than ``dimension``.
    """
    meta = dict(collection.metadata or {})
    if META_FORMAT not in meta:
        if collection.count():
            raise InvalidInputError(
                f"the Chroma collection {name!r} holds entries that memcore did not write; "
                "open another collection (?collection=...)"
            )
        meta[META_FORMAT] = FORMAT
    if meta[META_FORMAT] not in FORMATS:
        raise StoreCorruptedError(
            f"the Chroma collection {name!r} is in the format {meta[META_FORMAT]!r}, not {FORMAT!r}"
        )
    configuration = collection.configuration_json or {}
    space = next(
        (c["space"] for c in (configuration.get("hnsw"), configuration.get("spann")) if c and c.get("space")),
        meta.get("hnsw:space", "l2"),
    )
    if space != "cosine":
        raise InvalidInputError(
            f"the Chroma collection {name!r} measures {space} distances; memcore needs cosine"
        )
    stored = meta.get(META_DIMENSION)
    if dimension is not None and stored is not None and stored != dimension:
        raise DimensionMismatchError(
            f"the Chroma collection {name!r} holds {stored}-dimensional vectors, not {dimension}"
        )
    if dimension is not None:
        meta[META_DIMENSION] = dimension
    return meta


def int_value(meta: Meta, key: str) -> int | None:
    """``meta[key]`` if it is an int."""
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def holds_stand_ins(collection: Collection) -> bool:
    """Whether any entry of ``collection`` holds a stand-in vector (for :data:`META_STAND_INS`)."""
    return bool(collection.get(where={VECTOR_KEY: False}, limit=1, include=[])["ids"])


def settled(meta: Meta) -> bool:
    """Whether the dimension is fixed and the index holds it: then nothing about it changes any more."""
    dimension = int_value(meta, META_DIMENSION)
    return dimension is not None and int_value(meta, META_INDEX_DIMENSION) == dimension


def backfill_scope_keys(collection: Collection) -> int:
    """Give every entry written before exact scopes existed its ``scope.key``.

    Collections made by an older memcore-chroma lack the key, so an exact scope would not see
    their records; the store calls this at open (holding the write lock) until
    :data:`META_SCOPE_KEYS` says it is done. A key that does not match the entry's scope fields
    is rewritten too.

    :returns: how many entries were given their key.
    """
    fixed, offset = 0, 0
    while True:
        page = collection.get(include=["metadatas"], limit=BACKFILL_PAGE, offset=offset)
        if not page["ids"]:
            return fixed
        stale = {}
        for record_id, meta in zip(page["ids"], page["metadatas"] or [], strict=True):
            key = scope_key(stored_scope(dict(meta)))
            if meta.get(SCOPE_KEY) != key:
                stale[record_id] = key
        if stale:
            collection.update(ids=list(stale), metadatas=[{SCOPE_KEY: key} for key in stale.values()])
            fixed += len(stale)
        offset += len(page["ids"])


NEVER_EXPIRES_MICROS = epoch_micros(NEVER_EXPIRES)
"""The :data:`~memcore_chroma.encoding.EXPIRES_AT_KEY` of a record that never expires (2**53 - 1)."""


def migrate(collection: Collection, stored_format: str) -> None:
    """Bring a collection of an older format (one of :data:`FORMATS`) to :data:`FORMAT`.

    Each step can stop anywhere and run again: the store calls this at open (holding the write
    lock) until :data:`META_FORMAT` says :data:`FORMAT`, which it writes only once this returns.
    """
    if stored_format == FORMAT_1:
        migrate_entry_ids(collection)
    if stored_format in (FORMAT_1, FORMAT_2):
        backfill_expiry(collection)


def backfill_expiry(collection: Collection) -> int:
    """Give every entry without :data:`~memcore_chroma.encoding.EXPIRES_AT_KEY` the expiry of a
    record that never expires (:data:`NEVER_EXPIRES_MICROS`).

    Entries written before records could expire (:data:`FORMAT_2`) lack the key, and Chroma's
    ``where`` never matches a key an entry lacks: the implicit read condition ``expires_at > now``
    would hide them, and filters on ``expires_at`` would miss them. Only the key is written
    (``update`` merges it into the entry's metadata; documents, vectors and other keys stay). Pages
    are read by offset; a pass that gave entries their key is followed by another, until one finds
    none to fix, so that an entry shifted past a page meanwhile (by a concurrent delete of another
    client of a server) is not left out. The JSON documents need no change: a record without
    ``expires_at`` never expires.

    :returns: how many entries were given their key.
    """

    def fix(ids: list[str], metadatas: list[Metadata]) -> tuple[int, int]:
        missing = [i for i, meta in zip(ids, metadatas, strict=True) if EXPIRES_AT_KEY not in meta]
        if missing:
            never: dict[str, Any] = {EXPIRES_AT_KEY: NEVER_EXPIRES_MICROS}
            collection.update(ids=missing, metadatas=[never] * len(missing))
        return len(missing), 0  # updated in place: nothing leaves the pages before the offset

    return _repair_in_passes(collection, fix)


def migrate_entry_ids(collection: Collection) -> int:
    """Move every entry of format 1 (:data:`FORMAT_1`) to its id of format 2.

    Format 1 named an entry by its record's id, so one id could hold one record across every
    scope. Each such entry (one without :data:`~memcore_chroma.encoding.RECORD_ID_KEY`) is written
    again under its :func:`~memcore_chroma.encoding.entry_id`, with the same vector, document and
    metadata plus its record's id, and only then deleted: a migration that stops loses nothing,
    and running it again finishes it. The store calls this at open (holding the write lock) until
    :data:`META_FORMAT` says :data:`FORMAT`. Pages are read in Chroma's insertion order, in which
    the rewritten entries come last; passes repeat until one moves nothing.

    :returns: how many entries were moved.
    :raises StoreCorruptedError: if an entry of format 1 does not hold its record.
    """

    def fix(ids: list[str], metadatas: list[Metadata]) -> tuple[int, int]:
        old = [i for i, meta in zip(ids, metadatas, strict=True) if RECORD_ID_KEY not in meta]
        return (_move(collection, old) if old else 0), len(old)  # the moved ones leave the page

    return _repair_in_passes(collection, fix)


PageRepair = Callable[[list[str], list[Metadata]], tuple[int, int]]
"""``fix(ids, metadatas)`` -> (entries repaired, entries of the page moved out of place)."""


def _repair_in_passes(collection: Collection, fix: PageRepair) -> int:
    """Page through the collection's metadatas by offset, letting ``fix`` repair each page, in
    passes until one repairs nothing (an entry shifted past a page meanwhile is caught by the next).

    :param fix: ``fix(ids, metadatas)`` -> (how many entries it repaired, how many of the page's
        entries it removed from where they were, so the next page starts that much earlier).
    :returns: how many entries were repaired in all.
    """
    repaired = 0
    while True:
        repaired_now, offset = 0, 0
        while True:
            page = collection.get(include=["metadatas"], limit=BACKFILL_PAGE, offset=offset)
            if not page["ids"]:
                break
            fixed, removed = fix(page["ids"], list(page["metadatas"] or []))
            repaired_now += fixed
            offset += len(page["ids"]) - removed
        if not repaired_now:
            return repaired
        repaired += repaired_now


def _move(collection: Collection, ids: list[str]) -> int:
    """Write the format-1 entries ``ids`` under their format-2 ids, then delete them.

    A format-1 entry was named by a record id its writer chose, so it may sit on another entry's
    format-2 id (a crafted record's id can be ``entry_id`` of someone else's record). Such an
    occupant is moved first, wherever it is in the collection: an upsert onto it would merge its
    metadata into the moved record, and deleting it afterwards would delete the moved record.

    :returns: how many entries were moved (the occupants included).
    :raises StoreCorruptedError: if the entries left block each other's moves, which a record id
        chosen by a writer cannot bring about.
    """
    moved, pending = 0, list(ids)
    while pending:
        found = collection.get(ids=pending, include=["embeddings", "documents", "metadatas"])
        documents = found["documents"] or []
        records = [decode(i, d, legacy=True) for i, d in zip(found["ids"], documents, strict=True)]
        targets = [entry_id(record) for record in records]
        blockers = _format_1_ids(collection, targets)
        if missing := blockers - set(found["ids"]):
            pending = [*found["ids"], *sorted(missing)]
            continue
        ready = [i for i, target in enumerate(targets) if target not in blockers]
        if not ready:
            raise StoreCorruptedError(
                f"format-1 entries {sorted(blockers)} block each other's move to format 2"
            )
        metadatas = found["metadatas"] or []
        embeddings = np.asarray(found["embeddings"], dtype=np.float32)
        collection.upsert(
            ids=[targets[i] for i in ready],
            embeddings=embeddings[ready],
            documents=[documents[i] for i in ready],
            metadatas=[{**metadatas[i], RECORD_ID_KEY: str(records[i].id)} for i in ready],
        )
        collection.delete(ids=[found["ids"][i] for i in ready])
        moved += len(ready)
        pending = [found["ids"][i] for i, target in enumerate(targets) if target in blockers]
    return moved


def _format_1_ids(collection: Collection, ids: list[str]) -> set[str]:
    """Those of ``ids`` that name format-1 entries (entries without their record's id)."""
    found = collection.get(ids=ids, include=["metadatas"])
    return {
        i for i, meta in zip(found["ids"], found["metadatas"] or [], strict=True) if RECORD_ID_KEY not in meta
    }
