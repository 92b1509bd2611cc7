"""Adapters that let agent frameworks use memcore stores where they expect their own types.

Each adapter lives in its own module and needs its framework's extra:

- ``memcore[langchain]``: :mod:`memcore.integrations.langchain` (a LangChain ``VectorStore``);
- ``memcore[camel]``: :mod:`memcore.integrations.camel` (a CAMEL ``AgentMemory``);
- ``memcore[langgraph]``: :mod:`memcore.integrations.langgraph` (a LangGraph ``BaseStore``);
- ``memcore[openai-agents]``: :mod:`memcore.integrations.openai_agents` (an Agents SDK ``Session``);
- ``memcore[mcp]``: :mod:`memcore.integrations.mcp` (the MCP memory server behind ``memcore mcp``).

OpenTelemetry tracing (``memcore[otel]``) is not an adapter: see :mod:`memcore.telemetry`.
"""
