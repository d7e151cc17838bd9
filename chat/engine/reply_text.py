"""Turn a stream of token bytes into display-safe reply text.

Three things make this more than `bytes.decode()` per token:
- a UTF-8 character can be split across tokens (emoji, CJK): an incremental
  decoder holds the partial bytes until the character is complete;
- stop sequences can be split across tokens too: text that could be the start
  of a stop sequence is held back until it is known not to be one;
- model output is untrusted: escape sequences and control characters are
  removed (see `chat.sanitize`), also when split across tokens.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from chat.sanitize import TerminalSanitizer


class ReplyText:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._sanitizer = TerminalSanitizer()
        self._stops = [s for s in stop if s]
        self._pending = ""  # decoded, not yet released: may be the start of a stop sequence
        self.text = ""  # everything released so far
        self.stopped = False  # a stop sequence was found

    def feed(self, token_bytes: bytes) -> str:
        """Add one token's bytes; return the newly released, safe text."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(token_bytes)
        cut = self._first_stop(self._pending)
        if cut is not None:
            self.stopped = True
            return self._release(self._pending[:cut], rest="")
        keep = self._partial_stop_length(self._pending)
        return self._release(
            self._pending[: len(self._pending) - keep],
            rest=self._pending[len(self._pending) - keep :],
        )

    def flush(self) -> str:
        """The reply ended: release whatever was held back."""
        if self.stopped:
            return ""
        tail = self._pending + self._decoder.decode(b"", final=True)
        return self._release(tail, rest="")

    def _release(self, text: str, rest: str) -> str:
        self._pending = rest
        safe = self._sanitizer.feed(text)
        self.text += safe
        return safe

    def _first_stop(self, text: str) -> int | None:
        hits = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None

    def _partial_stop_length(self, text: str) -> int:
        """Length of the longest suffix of `text` that begins some stop sequence."""
        longest = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
