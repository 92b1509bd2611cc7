"""An MCP memory server over any memcore store (``memcore[mcp]``; ``memcore mcp`` runs it).

    from memcore import Scope, open_embedder, open_store
    from memcore.integrations.mcp import build_server

    store = open_store("jsonl:///var/lib/memories")
    server = build_server(store, open_embedder("hash"), Scope(tenant="acme", user_id="alice"))
    server.mcp.run()  # stdio; see memcore.cli.mcp for streamable HTTP and bearer tokens

Tools: ``remember``, ``recall``, ``list``, ``update``, ``forget``; resources:
``memcore://recent`` and ``memcore://memories/{id}``. The scope every call works in is never
an argument: it is the server's configured scope, or, behind bearer tokens
(:class:`TokenScopes`), the scope of the request's token. A tool call carrying an argument its
schema does not declare (``user_id``, ``tenant``, ``scope``...) is refused, not ignored, and
memcore's filters refuse scope fields (``FilterError``).

Each scope is served by a :class:`~memcore.agent.memories.VectorMemory`: ``remember`` writes
notes into the scope itself (consolidating a near-duplicate note instead of adding a copy);
recall, list, the resources, ``update`` and ``forget`` reach the memory's recall scope (the
configured scope widened by the policy's ``reach``, as for every memcore memory). ``forget``
deletes from the store, so the record is gone from every read path at once.

This module holds the tool logic (:class:`MemoryTools`) and the MCP surface (:func:`build_server`);
the transports are wired in :mod:`memcore.cli.mcp`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

import pydantic

try:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
    from mcp_types import ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("memcore.integrations.mcp needs the MCP SDK: pip install 'memcore[mcp]'") from exc

from memcore.agent.memories import POLICY_TTL, RECALL_FILTER, VectorMemory
from memcore.agent.policy import MemoryPolicy, RecallReach
from memcore.embedders.base import Embedder
from memcore.embedders.cache import cached
from memcore.errors import InvalidInputError, MemcoreError, RecordNotFoundError, ScopeError
from memcore.filters import FilterSpec
from memcore.records import MemoryRecord, MetadataValue
from memcore.scope import Scope
from memcore.store import KEEP, Store

RECENT_URI = "memcore://recent"
MEMORY_URI = "memcore://memories/{id}"
DEFAULT_RECENT = 20
"""How many memories ``memcore://recent`` shows by default."""
MIN_TOKEN_LENGTH = 16
MAX_LIMIT = 100
"""The largest ``limit`` a tool takes: a model asking for more gets a validation error."""

T = TypeVar("T")


class MemoryItem(pydantic.BaseModel):
    """One memory as the tools and resources show it."""

    id: str
    content: str
    role: str
    kind: str
    metadata: dict[str, MetadataValue]
    created_at: datetime
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    agent_id: str | None = None
    session_id: str | None = None
    score: float | None = pydantic.Field(default=None, description="similarity, for recall")

    @classmethod
    def of(cls, record: MemoryRecord, score: float | None = None) -> MemoryItem:
        """The item of a stored record (and its recall score)."""
        return cls(
            id=str(record.id),
            content=record.message.content,
            role=record.message.role,
            kind=record.kind,
            metadata=dict(record.metadata),
            created_at=record.created_at,
            updated_at=record.updated_at,
            expires_at=record.expires_at,
            agent_id=record.scope.agent_id,
            session_id=record.scope.session_id,
            score=score,
        )


class Memories(pydantic.BaseModel):
    """A list of memories (``recall``: best first; ``list``: in the order asked)."""

    memories: list[MemoryItem]


class Forgotten(pydantic.BaseModel):
    """What ``forget`` deleted."""

    id: str
    deleted: int = pydantic.Field(
        description="records deleted (one id can name a record in several sessions)"
    )


def _dump(value: pydantic.BaseModel) -> str:
    return value.model_dump_json(indent=2)


class TokenScopes:
    """Bearer tokens, each standing for one scope: the MCP SDK's ``TokenVerifier`` for HTTP.

    Tokens are kept as SHA-256 digests only; an unknown token is refused (HTTP 401 by the SDK).

    :param tokens: token -> the scope a request carrying it works in.
    :raises InvalidInputError: for a token shorter than :data:`MIN_TOKEN_LENGTH` characters.
    :raises ScopeError: for a scope that is not concrete.
    """

    def __init__(self, tokens: Mapping[str, Scope]) -> None:
        if not tokens:
            raise InvalidInputError("no bearer tokens given")
        self._scopes: dict[str, Scope] = {}
        for token, scope in tokens.items():
            if not isinstance(token, str) or len(token) < MIN_TOKEN_LENGTH:
                raise InvalidInputError(f"a bearer token has at least {MIN_TOKEN_LENGTH} characters")
            if not isinstance(scope, Scope) or scope.is_everything:
                raise ScopeError(f"a token's scope must be a concrete Scope, got {scope!r}")
            self._scopes[_digest(token)] = scope

    @classmethod
    def from_file(cls, path: str | Path) -> TokenScopes:
        """Read ``{"<token>": {"tenant": "acme", "user_id": "alice", "agent_id": ...}, ...}``.

        :raises InvalidInputError: for a file that is missing or not such a JSON object.
        :raises ScopeError: for a scope value memcore refuses.
        """
        try:
            entries = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"cannot read the tokens file {str(path)!r}: {exc}") from exc
        if not isinstance(entries, dict) or not all(isinstance(fields, dict) for fields in entries.values()):
            raise InvalidInputError(
                'the tokens file is a JSON object {"<token>": {"tenant": ..., "user_id": ...}}'
            )
        if any("tenant" not in fields for fields in entries.values()):
            raise ScopeError("every token's scope names its tenant")
        return cls({token: Scope(**fields) for token, fields in entries.items()})

    @property
    def scopes(self) -> list[Scope]:
        """The scopes the tokens stand for."""
        return list(dict.fromkeys(self._scopes.values()))

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's ``TokenVerifier`` hook: an access token for a known token, else ``None``."""
        scope = self._scopes.get(_digest(token))
        if scope is None:
            return None
        # The client id names the principal the SDK binds an HTTP session to: one per scope.
        return AccessToken(token=token, client_id=f"memcore:{scope.digest()}", scopes=[])

    def scope_of(self, access: AccessToken | None) -> Scope:
        """The scope of an authenticated request.

        :raises ScopeError: for a request without a token this object issued.
        """
        scope = None if access is None else self._scopes.get(_digest(access.token))
        if scope is None:
            raise ScopeError("this request carries no valid bearer token")
        return scope


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class MemoryTools:
    """What the MCP tools and resources do, for a scope the caller (the server) resolved.

    :param store: the memcore store; not closed by this object.
    :param embedder: embeds notes and queries; the store is bound to it.
    :param scopes: every scope the server may be asked to work in (one memory each).
    :param reach: how far recall, list, update and forget reach from a scope
        (:class:`~memcore.agent.policy.MemoryPolicy`'s ``reach``).
    :param recent: how many memories :meth:`recent` returns.
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        scopes: Iterable[Scope],
        *,
        reach: RecallReach = "agent",
        recent: int = DEFAULT_RECENT,
    ) -> None:
        self.store = store
        self.recent_limit = recent
        shared = cached(embedder)
        policy = MemoryPolicy(reach=reach)
        self._memories = {scope: VectorMemory(store, shared, scope, policy=policy) for scope in scopes}
        if not self._memories:
            raise ScopeError("a memory server needs at least one scope")

    def memory(self, scope: Scope) -> VectorMemory:
        """The memory serving ``scope``.

        :raises ScopeError: for a scope the server was not configured with.
        """
        memory = self._memories.get(scope)
        if memory is None:
            raise ScopeError(f"this server does not serve the scope {scope}")
        return memory

    async def remember(
        self, scope: Scope, text: str, metadata: dict[str, MetadataValue] | None, ttl_seconds: float | None
    ) -> MemoryItem:
        """Store a note (or refresh the near-identical note already stored).

        :raises InvalidInputError: for a blank ``text``.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("remember needs a non-empty text")
        note = await self.memory(scope).aremember(
            text, metadata=metadata, ttl=POLICY_TTL if ttl_seconds is None else ttl_seconds
        )
        return MemoryItem.of(note)

    async def recall(self, scope: Scope, query: str, limit: int, filter: FilterSpec | None) -> Memories:
        """The memories most relevant to ``query`` that pass ``filter``, best first."""
        memory = self.memory(scope)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("recall needs a non-empty query")
        spec: FilterSpec = RECALL_FILTER if not filter else {"$and": [RECALL_FILTER, filter]}  # {}: none
        hits = await memory.recall_block.aretrieve(query, limit=limit, filter=spec)
        return Memories(memories=[MemoryItem.of(hit.record, hit.score) for hit in hits])

    async def list(
        self, scope: Scope, limit: int, filter: FilterSpec | None, order: Literal["asc", "desc"]
    ) -> Memories:
        """Memories by time (``desc``: newest first): what recall could find, so no system prompt
        or tool result."""
        reach = self.memory(scope).recall_scope
        spec: FilterSpec = RECALL_FILTER if not filter else {"$and": [RECALL_FILTER, filter]}
        records = await self.store.alist(reach, filter=spec, order=order, limit=limit)
        return Memories(memories=[MemoryItem.of(record) for record in records])

    async def update(
        self,
        scope: Scope,
        id: str,
        text: str | None,
        metadata: dict[str, MetadataValue | None] | None,
        ttl_seconds: float | None,
    ) -> MemoryItem:
        """Change one memory's text (re-embedded), metadata (``None`` removes a key) or lifetime."""
        record = await self.memory(scope).aupdate(
            id, content=text, metadata=metadata, ttl=KEEP if ttl_seconds is None else ttl_seconds
        )
        return MemoryItem.of(record)

    async def forget(self, scope: Scope, id: str) -> Forgotten:
        """Delete one memory from every read path.

        :raises RecordNotFoundError: if no memory of this id is in reach.
        """
        deleted = await self.memory(scope).aforget([id])
        if deleted == 0:
            raise RecordNotFoundError(f"no memory with id {id} in this scope")
        return Forgotten(id=str(UUID(id)), deleted=deleted)

    async def recent(self, scope: Scope) -> Memories:
        """The newest memories in reach, newest first."""
        return await self.list(scope, self.recent_limit, None, "desc")

    async def get(self, scope: Scope, id: str) -> Memories:
        """The memories of this id in reach (one, unless several sessions hold the id).

        :raises RecordNotFoundError: if there is none.
        """
        records = await self.store.aget(self.memory(scope).recall_scope, [id])
        if not records:
            raise RecordNotFoundError(f"no memory with id {id} in this scope")
        return Memories(memories=[MemoryItem.of(record) for record in records])


async def _tool_call(call: Awaitable[T]) -> T:
    """Run a tool's work; memcore's typed errors reach the client as tool errors it can read."""
    try:
        return await call
    except MemcoreError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


async def _resource_read(call: Awaitable[T]) -> T:
    try:
        return await call
    except RecordNotFoundError as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except MemcoreError as exc:
        raise ResourceError(f"{type(exc).__name__}: {exc}") from exc


def _strict(tool: Tool) -> Tool:
    """``tool``, refusing arguments it does not declare (the SDK's argument model ignores them).

    So a model cannot believe it set the scope with ``user_id="bob"``: the call fails instead.
    """
    loose = tool.fn_metadata.arg_model
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    strict: type[ArgModelBase] = type(
        loose.__name__, (loose,), {"model_config": config, "__module__": loose.__module__}
    )
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)
    return tool


Limit = Annotated[pydantic.StrictInt, pydantic.Field(ge=1, le=MAX_LIMIT, description=f"at most {MAX_LIMIT}")]
TTL = Annotated[float | None, pydantic.Field(gt=0, description="seconds until it expires; omit: never")]
Filter = Annotated[
    dict[str, Any] | None,
    pydantic.Field(
        description="memcore filter, Mongo-style, on role, kind, created_at and metadata.<key>, e.g. "
        '{"metadata.topic": {"$in": ["work", "travel"]}}'
    ),
]
Metadata = Annotated[
    dict[str, MetadataValue] | None,
    pydantic.Field(description="flat key -> string, number, boolean or list of strings"),
]
MemoryId = Annotated[str, pydantic.Field(description="the memory's id (a UUID)")]


@dataclass(frozen=True)
class MemoryServer:
    """What :func:`build_server` returns: the SDK's server and the memory behind it."""

    mcp: MCPServer[Any]
    """The MCP SDK's server: ``mcp.run()`` (stdio), ``mcp.run_streamable_http_async(...)``..."""
    tools: MemoryTools


def build_server(
    store: Store,
    embedder: Embedder,
    scope: Scope | None = None,
    *,
    tokens: TokenScopes | None = None,
    reach: RecallReach = "agent",
    recent: int = DEFAULT_RECENT,
    name: str = "memcore",
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "WARNING",
) -> MemoryServer:
    """An MCP server whose tools and resources read and write ``store`` within one scope per call.

    :param scope: the scope every call works in (stdio, or HTTP without tokens).
    :param tokens: instead of ``scope``: each HTTP request works in the scope of its bearer token
        (``streamable-http`` transport only; requests without a known token get HTTP 401).
    :param reach: how far recall, list, update and forget reach from the scope (memcore's
        :class:`~memcore.agent.policy.MemoryPolicy` ``reach``; ``remember`` writes into the scope itself).
    :param recent: how many memories ``memcore://recent`` shows.
    :raises InvalidInputError: unless exactly one of ``scope`` and ``tokens`` is given.
    """
    if (scope is None) == (tokens is None):
        raise InvalidInputError("a memory server takes a scope or bearer tokens, exactly one of them")
    if scope is not None and scope.is_everything:
        raise ScopeError("a memory server needs a concrete scope, not Scope.everything()")
    served = [scope] if scope is not None else tokens.scopes if tokens is not None else []
    tools = MemoryTools(store, embedder, served, reach=reach, recent=recent)

    def current_scope() -> Scope:
        # Never from the call's arguments: the configuration, or the request's bearer token.
        if tokens is not None:
            return tokens.scope_of(get_access_token())
        assert scope is not None
        return scope

    async def remember(text: str, metadata: Metadata = None, ttl_seconds: TTL = None) -> MemoryItem:
        """Remember a fact, preference or decision for later conversations. Repeating a stored
        note refreshes it rather than storing a copy. Returns the memory with its id."""
        return await _tool_call(tools.remember(current_scope(), text, metadata, ttl_seconds))

    async def recall(query: str, limit: Limit = 5, filter: Filter = None) -> Memories:
        """Find the memories most relevant to a query (similarity and keywords), best first."""
        return await _tool_call(tools.recall(current_scope(), query, limit, filter))

    async def list_memories(
        limit: Limit = 20, filter: Filter = None, order: Literal["asc", "desc"] = "desc"
    ) -> Memories:
        """List memories by time, newest first unless order is "asc"."""
        return await _tool_call(tools.list(current_scope(), limit, filter, order))

    async def update(
        id: MemoryId,
        text: str | None = None,
        metadata: Annotated[
            dict[str, MetadataValue | None] | None,
            pydantic.Field(description="keys to set; a null value removes the key"),
        ] = None,
        ttl_seconds: TTL = None,
    ) -> MemoryItem:
        """Correct a memory: new text, metadata changes, or a new lifetime."""
        return await _tool_call(tools.update(current_scope(), id, text, metadata, ttl_seconds))

    async def forget(id: MemoryId) -> Forgotten:
        """Delete a memory for good: no later recall, list or resource returns it."""
        return await _tool_call(tools.forget(current_scope(), id))

    definitions: list[tuple[Callable[..., Awaitable[Any]], str, ToolAnnotations]] = [
        (remember, "remember", ToolAnnotations(read_only_hint=False, destructive_hint=False)),
        (recall, "recall", ToolAnnotations(read_only_hint=True)),
        (list_memories, "list", ToolAnnotations(read_only_hint=True)),
        (
            update,
            "update",
            ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
        ),
        (
            forget,
            "forget",
            ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
        ),
    ]
    server: MCPServer[Any] = MCPServer(
        name,
        instructions="Long-term memory. Use `recall` before answering from memory, `remember` for facts "
        "worth keeping, `forget` when asked to. Whose memory this is comes from the connection, "
        "never from arguments.",
        tools=[
            _strict(Tool.from_function(fn, name=tool_name, annotations=notes))
            for fn, tool_name, notes in definitions
        ],
        token_verifier=tokens,
        # Bearer tokens only: no OAuth routes, no resource metadata; the issuer URL is required
        # by AuthSettings but unused without them.
        auth=None
        if tokens is None
        else AuthSettings(issuer_url="http://localhost", resource_server_url=None),
        log_level=log_level,
    )

    @server.resource(RECENT_URI, name="recent", mime_type="application/json")
    async def recent_memories() -> str:
        """The newest memories, newest first."""
        return _dump(await _resource_read(tools.recent(current_scope())))

    @server.resource(MEMORY_URI, name="memory", mime_type="application/json")
    async def memory_by_id(id: str) -> str:
        """One memory by id."""
        return _dump(await _resource_read(tools.get(current_scope(), id)))

    return MemoryServer(mcp=server, tools=tools)
