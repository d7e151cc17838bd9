"""A reply split into its thinking and its answer as it streams.

A thinking block is only recognised at the start of a reply (after
whitespace), or from the first character when the prompt itself opened it
(the template's generation prompt ends inside the block, DeepSeek-R1 style):
a marker quoted later in an answer is answer text, as llama.cpp treats it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol

from chat.engine.reasoning.markers import ThinkingMarkers

PartKind = Literal["thinking", "answer"]


@dataclass(frozen=True)
class ReplyPart:
    """A run of the reply's text of one kind, and the tokens that spelled it
    (markers are tokens of the thinking; a part may carry tokens and no text)."""

    kind: PartKind
    text: str
    tokens: int = 0


class StreamedToken(Protocol):
    """What a token streamed by an engine says (chat.engine.protocol's
    `TokenEvent`, which this package sits below)."""

    @property
    def text(self) -> str: ...

    @property
    def token_id(self) -> int: ...

    @property
    def thinking(self) -> bool: ...


def token_parts(event: StreamedToken, splitter: ThinkingSplitter | None) -> list[ReplyPart]:
    """One streamed token as parts of the reply: thinking when a model server
    sent it in its thinking field, else what `splitter` (the model's markers)
    makes of it, else answer. The chat's reply stream and one-shot mode both
    decide through here, so that they split a reply alike."""
    # A piece without a token id (-1) is text the engine held back and
    # released at the end: it spells no token of its own.
    tokens = 0 if event.token_id < 0 else 1
    if event.thinking:
        return [ReplyPart("thinking", event.text, tokens)]
    if splitter is None:
        return [ReplyPart("answer", event.text, tokens)]
    return splitter.feed(event.text, tokens)


def inside_thought(splitter: ThinkingSplitter | None, thinking: str, answered: bool) -> bool:
    """Whether a reply (or a tool turn's step) is inside its thinking now:
    its splitter says so once it has seen the model's markers (a thought
    closed on the last token has no answer yet, and is not); thinking that
    came apart from the text (a server's thinking field) is open while no
    answer has come."""
    if splitter is not None and splitter.saw_thinking:
        return splitter.in_thinking
    return bool(thinking) and not answered


class ThinkingSplitter:
    """Split a reply's text, fed piece by piece as it streams, into thinking
    and answer parts. Text that may be the start of a marker is held back
    until it is known; `flush` releases it when the reply ends."""

    def __init__(
        self,
        markers: ThinkingMarkers | None,
        starts_inside: bool = False,
        starts_after: bool = False,
    ) -> None:
        """`starts_inside`: the text fed starts inside the thinking block (the
        prompt opened it, or a reply cut there goes on); `starts_after`: it
        starts right after the block closed (a reply cut there goes on with
        its answer)."""
        self.markers = markers
        self._state: Literal["start", "thinking", "lead", "answer"]
        self._state = "start"
        if markers and starts_inside:
            self._state = "thinking"
        elif markers and starts_after:
            self._state = "lead"
        self._at_part_start = True  # leading whitespace of a part is not shown
        self._buffer = ""  # fed, not yet resolved
        self._resolved = 0  # stream offset of the buffer's first character
        self._fed = 0
        self._pieces: deque[tuple[int, int]] = deque()  # (offset, tokens) not yet counted
        self._out: list[ReplyPart] = []
        self.thinking = ""
        self.answer = ""
        self.thinking_tokens = 0
        self.answer_tokens = 0
        self.saw_thinking = bool(markers and (starts_inside or starts_after))
        self._may_reopen = bool(markers and starts_inside)

    @property
    def in_thinking(self) -> bool:
        """Inside the thinking block now: after `flush`, the reply stopped mid-thought."""
        return self._state == "thinking"

    @property
    def holding(self) -> bool:
        """Text fed is held back: it may be the start of a marker."""
        return bool(self._buffer)

    def feed(self, text: str, tokens: int = 0) -> list[ReplyPart]:
        """Add a piece of the reply (`tokens` sampled tokens spelled it);
        return the parts now known."""
        self._pieces.append((self._fed, tokens))
        self._fed += len(text)
        self._buffer += text
        self._run(final=False)
        return self._take_out()

    def flush(self) -> list[ReplyPart]:
        """The reply ended: resolve what was held back."""
        self._run(final=True)
        kind: PartKind = "thinking" if self.in_thinking else "answer"
        while self._pieces:
            self._count(kind, self._pieces.popleft()[1])
        return self._take_out()

    def _run(self, final: bool) -> None:
        markers = self.markers
        while self._buffer:
            if markers is None or self._state == "answer":
                self._consume(len(self._buffer), "answer", shown=True)
            elif self._state == "start":
                if not self._start(markers, final):
                    return
            elif self._state == "thinking":
                if not self._thinking(markers, final):
                    return
            elif not self._lead(markers, final):
                return

    def _start(self, markers: ThinkingMarkers, final: bool) -> bool:
        rest = self._buffer.lstrip()
        if rest.startswith(markers.open):
            self._consume(len(self._buffer) - len(rest) + len(markers.open), "thinking")
            self._state = "thinking"
            self.saw_thinking = True
            self._at_part_start = True
            return True
        if not final and markers.open.startswith(rest):
            return False
        self._state = "lead"
        return True

    def _thinking(self, markers: ThinkingMarkers, final: bool) -> bool:
        if self._may_reopen:
            # The prompt opened the block: a model may still write the opening marker.
            rest = self._buffer.lstrip()
            if rest.startswith(markers.open):
                self._consume(len(self._buffer) - len(rest) + len(markers.open), "thinking")
            elif not final and markers.open.startswith(rest):
                return False
            self._may_reopen = False
        end = self._buffer.find(markers.close)
        if end >= 0:
            self._consume(end, "thinking", shown=True)
            self._consume(len(markers.close), "thinking")
            self._state = "lead"
            self._at_part_start = True
            return True
        keep = 0 if final else _partial_suffix(self._buffer, markers.close)
        self._consume(len(self._buffer) - keep, "thinking", shown=True)
        return False

    def _lead(self, markers: ThinkingMarkers, final: bool) -> bool:
        rest = self._buffer.lstrip()
        leads = markers.answer_leads
        lead = next((lead for lead in leads if rest.startswith(lead)), None)
        if lead is not None:
            self._consume(len(self._buffer) - len(rest) + len(lead), "answer")
        elif not final and (not rest or any(lead.startswith(rest) for lead in leads)):
            return False
        self._state = "answer"
        self._at_part_start = True
        return True

    def _consume(self, length: int, kind: PartKind, shown: bool = False) -> None:
        text, self._buffer = self._buffer[:length], self._buffer[length:]
        self._resolved += length
        while self._pieces and self._pieces[0][0] < self._resolved:
            self._count(kind, self._pieces.popleft()[1])
        if not shown:
            return
        if self._at_part_start:
            text = text.lstrip()
            self._at_part_start = not text
        if text:
            self._add(kind, text, 0)
            if kind == "thinking":
                self.thinking += text
            else:
                self.answer += text

    def _count(self, kind: PartKind, tokens: int) -> None:
        if not tokens:
            return
        if kind == "thinking":
            self.thinking_tokens += tokens
        else:
            self.answer_tokens += tokens
        self._add(kind, "", tokens)

    def _add(self, kind: PartKind, text: str, tokens: int) -> None:
        last = self._out[-1] if self._out else None
        if last is not None and last.kind == kind:
            self._out[-1] = ReplyPart(kind, last.text + text, last.tokens + tokens)
        else:
            self._out.append(ReplyPart(kind, text, tokens))

    def _take_out(self) -> list[ReplyPart]:
        out, self._out = self._out, []
        return out


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that begins `marker`."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:length]):
            return length
    return 0
