"""Counting the tokens of a chat-completions prompt.

A :class:`TokenCounter` says how many tokens a list of messages costs as a
prompt. Context creators (:mod:`memcore.agent.context`) use it to fit a budget. The
default, :class:`HeuristicTokenCounter`, works offline and downloads nothing; it
approximates a BPE tokenizer. When the exact count matters, pass a counter
wrapping your model's real tokenizer (for example a tiktoken encoding): any
object with a matching ``count`` method will do.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

from memcore.records import Message

_PIECE = re.compile(r"\w+|[^\w\s]")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a chat-completions prompt.

    Implementations must be deterministic (the same messages always cost the
    same) and monotonic (adding a message to a prompt never lowers its count);
    context creators rely on both to enforce a budget exactly. They need not be
    additive: a prompt may cost more or less than the sum of its messages.
    """

    def count(self, messages: Sequence[Message]) -> int:
        """The tokens of a prompt made of ``messages``, in order.

        :param messages: the prompt's messages; may be empty.
        :returns: the prompt's token count, including any fixed per-prompt
            overhead, so even an empty prompt may cost a few tokens.
        """
        ...


class HeuristicTokenCounter:
    """An offline approximation of a BPE tokenizer's prompt count; no downloads.

    It follows the shape of OpenAI's cookbook recipe for chat prompts: each
    message costs :attr:`TOKENS_PER_MESSAGE` plus the tokens of its role,
    content, name and tool calls, and every prompt :attr:`REPLY_PRIMING` more.
    A text's tokens are estimated from its words and punctuation marks: an ASCII
    word costs one token per :attr:`CHARS_PER_TOKEN` characters (rounded up),
    each non-ASCII character one token, each punctuation mark one token.

    It is an approximation, not a tokenizer: it tends to over-count English
    prose slightly (the safe side of a budget) and ignores whitespace. It is
    deterministic and monotonic, as :class:`TokenCounter` requires. Subclass
    and change the constants to tune it.
    """

    TOKENS_PER_MESSAGE: ClassVar[int] = 3
    TOKENS_PER_NAME: ClassVar[int] = 1
    TOKENS_PER_TOOL_CALL: ClassVar[int] = 3
    REPLY_PRIMING: ClassVar[int] = 3
    CHARS_PER_TOKEN: ClassVar[int] = 4

    def count(self, messages: Sequence[Message]) -> int:
        """The estimated tokens of a prompt made of ``messages``.

        :param messages: the prompt's messages; may be empty.
        :returns: the estimate; an empty prompt costs :attr:`REPLY_PRIMING`.
        """
        return self.REPLY_PRIMING + sum(self._message_tokens(message) for message in messages)

    def _message_tokens(self, message: Message) -> int:
        tokens = self.TOKENS_PER_MESSAGE + self._text_tokens(message.role)
        tokens += self._text_tokens(message.content)
        if message.name is not None:
            tokens += self.TOKENS_PER_NAME + self._text_tokens(message.name)
        for call in message.tool_calls or ():
            tokens += self.TOKENS_PER_TOOL_CALL + self._text_tokens(call.id)
            tokens += self._text_tokens(call.function.name) + self._text_tokens(call.function.arguments)
        if message.tool_call_id is not None:
            tokens += self._text_tokens(message.tool_call_id)
        return tokens

    def _text_tokens(self, text: str) -> int:
        if len(text) > _MEMOISED_CHARS:
            return _estimate.__wrapped__(text, self.CHARS_PER_TOKEN)
        return _estimate(text, self.CHARS_PER_TOKEN)


_MEMOISED_CHARS = 4_096
"""Texts up to this long have their estimate memoised (at most a few tens of MB held)."""


# Memoised: a context creator counts the same messages many times while it fits a budget,
# and an agent's window repeats from one turn to the next.
@functools.lru_cache(maxsize=8_192)
def _estimate(text: str, chars_per_token: int) -> int:
    tokens = 0
    for piece in _PIECE.findall(text):
        non_ascii = 0 if piece.isascii() else sum(not char.isascii() for char in piece)
        tokens += math.ceil((len(piece) - non_ascii) / chars_per_token) + non_ascii
    return tokens
