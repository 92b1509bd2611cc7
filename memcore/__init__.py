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

from typing import TYPE_CHECKING

from memcore import errors as errors
from memcore.lazy_exports import lazy_getattr

# For type checkers only (``X as X``: an explicit re-export); at run time each name is imported
# on first use from the module _LAZY_EXPORTS names.
if TYPE_CHECKING:
    from memcore.agent.context import ChronologicalContextCreator as ChronologicalContextCreator
    from memcore.agent.context import ContextCreator as ContextCreator
    from memcore.agent.context import ScoreBasedContextCreator as ScoreBasedContextCreator
    from memcore.agent.memories import AgentMemory as AgentMemory
    from memcore.agent.memories import ChatHistoryMemory as ChatHistoryMemory
    from memcore.agent.memories import LongtermMemory as LongtermMemory
    from memcore.agent.memories import VectorMemory as VectorMemory
    from memcore.agent.policy import MemoryPolicy as MemoryPolicy
    from memcore.agent.sessions import MemoryModel as MemoryModel
    from memcore.agent.sessions import SessionMemory as SessionMemory
    from memcore.agent.tokens import HeuristicTokenCounter as HeuristicTokenCounter
    from memcore.agent.tokens import TokenCounter as TokenCounter
    from memcore.hookspecs import hookimpl as hookimpl
    from memcore.plugins import open_embedder as open_embedder
    from memcore.plugins import open_store as open_store
    from memcore.records import ContextRecord as ContextRecord
    from memcore.records import MemoryRecord as MemoryRecord
    from memcore.records import Message as Message
    from memcore.records import ScoredRecord as ScoredRecord
    from memcore.scope import Scope as Scope
    from memcore.store import BaseStore as BaseStore
    from memcore.store import Capabilities as Capabilities
    from memcore.store import ScopeCount as ScopeCount
    from memcore.store import Store as Store

_LAZY_EXPORTS: dict[str, str] = {
    "AgentMemory": "memcore.agent.memories",
    "ChatHistoryMemory": "memcore.agent.memories",
    "LongtermMemory": "memcore.agent.memories",
    "MemoryModel": "memcore.agent.sessions",
    "MemoryPolicy": "memcore.agent.policy",
    "SessionMemory": "memcore.agent.sessions",
    "VectorMemory": "memcore.agent.memories",
    "BaseStore": "memcore.store",
    "Capabilities": "memcore.store",
    "ChronologicalContextCreator": "memcore.agent.context",
    "ContextCreator": "memcore.agent.context",
    "ContextRecord": "memcore.records",
    "HeuristicTokenCounter": "memcore.agent.tokens",
    "MemoryRecord": "memcore.records",
    "Message": "memcore.records",
    "Scope": "memcore.scope",
    "ScoreBasedContextCreator": "memcore.agent.context",
    "ScoredRecord": "memcore.records",
    "ScopeCount": "memcore.store",
    "Store": "memcore.store",
    "TokenCounter": "memcore.agent.tokens",
    "hookimpl": "memcore.hookspecs",
    "open_embedder": "memcore.plugins",
    "open_store": "memcore.plugins",
}

__all__ = sorted(["errors", *_LAZY_EXPORTS])


if not TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above instead and so
    # still flag a misspelt ``memcore.<name>``.
    __getattr__ = lazy_getattr("memcore", _LAZY_EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
