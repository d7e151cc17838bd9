"""Tool calls found in a reply as it streams, across token boundaries.

Text that may be the start of an opener (`<tool_`) is held back until it
is known; once an opener is complete the reply's text is over and the
call's begins: the engine then samples the rest under the call's grammar
(chat.engine.tool_calls.grammar), so when the reply ends the call's text
is JSON of the expected shape, read by `calls()`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from chat.engine.tool_calls.calls import ToolCall
from chat.engine.tool_calls.syntax import Opener, ToolCallSyntax
from chat.errors import KvchatError


class ToolCallTextError(KvchatError):
    """The model's call cannot be read (the reply was cut short mid-call)."""


class ToolCallParser:
    """Feed the reply's text piece by piece (`feed`), then `flush` at its
    end. `before` is the reply's own text, `call_text` the call's."""

    def __init__(self, syntax: ToolCallSyntax) -> None:
        self.syntax = syntax
        self.state: Literal["text", "call"] = "text"
        self.opener: Opener | None = None
        self.before = ""
        """Released reply text, up to the opener (not included)."""
        self.call_text = ""
        """What came after the opener."""
        self._buffer = ""
        self._at_start = True

    @property
    def in_call(self) -> bool:
        return self.state == "call"

    def feed(self, text: str) -> tuple[str, str]:
        """Add a piece of text; return (reply text now released, call text
        now known). The piece that completes an opener starts the call: what
        it holds after the opener is call text (see `drop_overshoot`)."""
        if self.state == "call":
            self.call_text += text
            return "", text
        self._buffer += text
        found = self._find_opener()
        if found is not None:
            start, opener = found
            released = self._release(self._buffer[:start])
            overshoot = self._buffer[start + len(opener.text) :]
            self._buffer = ""
            self.state = "call"
            self.opener = opener
            self.call_text = overshoot
            return released, overshoot
        keep = self._held_back()
        cut = len(self._buffer) - keep
        released = self._release(self._buffer[:cut])
        self._buffer = self._buffer[cut:]
        return released, ""

    def flush(self) -> str:
        """The reply ended: release what was held back."""
        if self.state == "call":
            return ""
        released = self._release(self._buffer)
        self._buffer = ""
        return released

    def drop_overshoot(self) -> None:
        """Forget the call text after the opener: the engine went back to
        the opener's end and samples what follows again, under the grammar."""
        self.call_text = ""

    @property
    def text_to_opener_end(self) -> str:
        """The reply's text up to the end of the opener."""
        return self.before + (self.opener.text if self.opener else "")

    def _release(self, text: str) -> str:
        if text.strip():
            self._at_start = False
        self.before += text
        return text

    def _find_opener(self) -> tuple[int, Opener] | None:
        buffer = self._buffer
        best: tuple[int, Opener] | None = None
        if self._at_start:
            stripped = buffer.lstrip()
            for opener in self.syntax.openers:
                if opener.at_start and stripped.startswith(opener.text):
                    best = (len(buffer) - len(stripped), opener)
                    break
        for opener in self.syntax.openers:
            if opener.at_start:
                continue
            at = buffer.find(opener.text)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, opener)
        return best

    def _held_back(self) -> int:
        """Length of the end of the buffer that may begin an opener."""
        buffer = self._buffer
        if self._at_start and not buffer.strip():
            return len(buffer)  # a reply that starts with whitespace: wait
        longest = 0
        for opener in self.syntax.openers:
            if opener.at_start:
                continue
            for length in range(min(len(opener.text) - 1, len(buffer)), longest, -1):
                if buffer.endswith(opener.text[:length]):
                    longest = length
                    break
        return longest

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls the reply made (none when it made none). Raises
        `ToolCallTextError` when the call's text is not a whole call."""
        if self.opener is None:
            return ()
        syntax = self.syntax
        text = self.opener.json_lead + self.call_text
        if syntax.closer:
            end = text.find(syntax.closer)
            if end < 0:
                raise ToolCallTextError("The model's tool call was cut off before its end.")
            text = text[:end]
        try:
            value, _ = json.JSONDecoder().raw_decode(text.strip())
        except ValueError:
            raise ToolCallTextError("The model's tool call was cut off before its end.") from None
        items = value if syntax.in_list and isinstance(value, list) else [value]
        return tuple(_call(item, syntax.arguments_key) for item in items)


def _call(item: Any, arguments_key: str) -> ToolCall:
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise ToolCallTextError("The model wrote a tool call without a tool name.")
    arguments = item.get(arguments_key, item.get("arguments", item.get("parameters", {})))
    if not isinstance(arguments, Mapping):
        raise ToolCallTextError("The model wrote a tool call whose arguments are not an object.")
    return ToolCall(item["name"], dict(arguments))
