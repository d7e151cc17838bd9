"""Which earlier replies can go back to a server as the ids they were sampled
as, instead of their text: the check every engine that sends ids makes
(llama-server's, vLLM's), asked of the server's own detokenizer.

A reply's saved ids (`ChatMessage.token_ids`) stand for its text only when
the server writes them as exactly that text: not so for an edited reply,
another model's ids, or a damaged row. Each reply is checked once (the meter
counts a long conversation often) and the answer remembered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from chat.engine.prompt_tokens import spells_whole
from chat.engine.protocol import ChatMessages

SPELLING_CACHE = 4096
"""Replies whose ids were checked against their text, remembered."""

Detokenize = Callable[[list[int]], "str | None"]
"""The server's detokenizer, special tokens written out: the text of the ids,
or None when it has none for them (ids it does not know)."""

_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")


class Remembered(Generic[_Key, _Value]):
    """The last `size` answers a server gave, for any thread to ask."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[_Key, _Value] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _Key) -> _Value | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: _Key, value: _Value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self._size:
                self._items.popitem(last=False)


class SampledReplies:
    """The replies of a conversation that go in as their sampled ids."""

    def __init__(self, detokenize: Detokenize, n_vocab: int | None) -> None:
        self._detokenize = detokenize
        self._n_vocab = n_vocab
        self._spellings: Remembered[tuple[str, tuple[int, ...], bool], bool] = Remembered(
            SPELLING_CACHE
        )

    def of(self, messages: ChatMessages, allow_whole: bool = True) -> dict[int, list[int]]:
        """The replies of `messages` that go in as their sampled ids, by
        index: those whose ids are this model's and spell their text (or, for
        a reply sent whole with its thinking, `sampled_whole`, end with it,
        whitespace aside, as the local engine checks; such replies are left
        out unless `allow_whole`)."""
        sampled = {}
        for index, message in enumerate(messages):
            ids = message.get("token_ids")
            content = message.get("content")
            whole = bool(message.get("sampled_whole"))
            if (
                message.get("role") != "assistant"
                or not isinstance(ids, (list, tuple))
                or not ids
                or not isinstance(content, str)
                or (whole and not allow_whole)
                or not all(type(i) is int and i >= 0 for i in ids)
                or (self._n_vocab is not None and max(ids) >= self._n_vocab)
            ):
                continue
            if self.spells(list(ids), content, whole):
                sampled[index] = list(ids)
        return sampled

    def spells(self, ids: list[int], content: str, whole: bool = False) -> bool:
        """Whether the server's detokenizer writes `ids` as exactly `content`
        (special tokens written out, so they never pass for plain text); with
        `whole`, as a text that ends with it, whitespace aside."""
        key = (content, tuple(ids), whole)
        known = self._spellings.get(key)
        if known is not None:
            return known
        spelled = self._detokenize(ids)
        same = spelled == content or (
            whole and spelled is not None and spells_whole(spelled, content)
        )
        self._spellings.put(key, same)
        return same
