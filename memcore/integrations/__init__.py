"""Adapters that let agent frameworks use memcore stores where they expect their own types.

Each adapter lives in its own module and needs its framework's extra:
``memcore[langchain]`` for :mod:`memcore.integrations.langchain`, ``memcore[camel]`` for
:mod:`memcore.integrations.camel`.
"""
