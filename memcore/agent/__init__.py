"""The agent memory layer, above the store contract: what to write, what to recall, what to send.

* :mod:`~memcore.agent.blocks`: blocks that write records and retrieve them (the recent window,
  similarity recall);
* :mod:`~memcore.agent.recall`: how recall ranks (dense, keyword, hybrid);
* :mod:`~memcore.agent.memories`: agent memories, which decide what to save and recall;
* :mod:`~memcore.agent.policy`: their settings;
* :mod:`~memcore.agent.context` and :mod:`~memcore.agent.tokens`: context creation under a token budget;
* :mod:`~memcore.agent.sessions`: a session's turns and summary, loaded and committed whole.

The public names are importable from :mod:`memcore` itself.
"""
