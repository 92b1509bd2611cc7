"""A LangGraph ``BaseStore`` over any memcore store (``memcore[langgraph]``).

    from langgraph.graph import StateGraph
    from memcore import Scope, open_embedder, open_store
    from memcore.integrations.langgraph import MemcoreLangGraphStore

    store = MemcoreLangGraphStore(
        open_store("postgresql://me@db/agents"),
        Scope(tenant="acme"),
        embedder=open_embedder("hash"),
        namespace_scope=("user_id",),  # ("alice", "memories") lives in alice's scope
    )
    graph = builder.compile(checkpointer=saver, store=store)

Items are records of kind ``langgraph`` (:data:`ITEM_KIND`) in the deployment's scope, or in the
scope their leading namespace labels name (``namespace_scope``); every read and delete goes to
the store with that scope (exact wherever the namespace fixes it), so no record of another
tenant, user or memory is ever read or deleted, whatever metadata it carries. Erasing a user
with memcore (``store.delete_where(Scope(tenant="acme", user_id="alice"), {})``) removes their
items from every LangGraph read path, vector search included. See :mod:`.layout` for the record
layout, :mod:`.filters` for ``filter=``, :mod:`.embedding` for vector search.
"""

from __future__ import annotations

try:
    import langgraph.store.base  # noqa: F401  # only to fail early, with the extra to install
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "memcore.integrations.langgraph needs langgraph: pip install 'memcore[langgraph]'"
    ) from exc

from memcore.integrations.langgraph.layout import ITEM_KIND, MAX_NAMESPACE_DEPTH, NamespaceError
from memcore.integrations.langgraph.store import MemcoreLangGraphStore

__all__ = ["ITEM_KIND", "MAX_NAMESPACE_DEPTH", "MemcoreLangGraphStore", "NamespaceError"]
