"""memcore: scoped, searchable memory for AI agents, on pluggable storage backends.

Open a store by URL and an embedder by name; both come from plugins::

    import memcore

    with memcore.open_store("memory://") as store:
        embedder = memcore.open_embedder("hash")
        ...

The names below are imported on first use, so that ``import memcore`` stays
cheap (no numpy, pydantic or plugin loading until something needs them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memcore import errors

if TYPE_CHECKING:
    from memcore.context import ChronologicalContextCreator, ContextCreator, ScoreBasedContextCreator
    from memcore.hookspecs import hookimpl
    from memcore.memories import AgentMemory, ChatHistoryMemory, LongtermMemory, VectorMemory
    from memcore.plugins import open_embedder, open_store
    from memcore.policy import MemoryPolicy
    from memcore.records import ContextRecord, MemoryRecord, Message, ScoredRecord
    from memcore.scope import Scope
    from memcore.sessions import MemoryModel, SessionMemory
    from memcore.store import BaseStore, Capabilities, Store
    from memcore.tokens import HeuristicTokenCounter, TokenCounter

_LAZY_EXPORTS: dict[str, str] = {
    "AgentMemory": "memcore.memories",
    "ChatHistoryMemory": "memcore.memories",
    "LongtermMemory": "memcore.memories",
    "MemoryModel": "memcore.sessions",
    "MemoryPolicy": "memcore.policy",
    "SessionMemory": "memcore.sessions",
    "VectorMemory": "memcore.memories",
    "BaseStore": "memcore.store",
    "Capabilities": "memcore.store",
    "ChronologicalContextCreator": "memcore.context",
    "ContextCreator": "memcore.context",
    "ContextRecord": "memcore.records",
    "HeuristicTokenCounter": "memcore.tokens",
    "MemoryRecord": "memcore.records",
    "Message": "memcore.records",
    "Scope": "memcore.scope",
    "ScoreBasedContextCreator": "memcore.context",
    "ScoredRecord": "memcore.records",
    "Store": "memcore.store",
    "TokenCounter": "memcore.tokens",
    "hookimpl": "memcore.hookspecs",
    "open_embedder": "memcore.plugins",
    "open_store": "memcore.plugins",
}

__all__ = [
    "AgentMemory",
    "BaseStore",
    "Capabilities",
    "ChatHistoryMemory",
    "ChronologicalContextCreator",
    "ContextCreator",
    "ContextRecord",
    "HeuristicTokenCounter",
    "LongtermMemory",
    "MemoryModel",
    "MemoryPolicy",
    "MemoryRecord",
    "Message",
    "Scope",
    "ScoreBasedContextCreator",
    "ScoredRecord",
    "SessionMemory",
    "Store",
    "TokenCounter",
    "VectorMemory",
    "errors",
    "hookimpl",
    "open_embedder",
    "open_store",
]


if not TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above instead and so
    # still flag a misspelt ``memcore.<name>``.
    def __getattr__(name: str) -> Any:
        module = _LAZY_EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'memcore' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
