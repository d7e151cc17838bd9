"""Find in the conversation, without Textual: how often a text occurs in each
message of the branch shown, and which occurrence is the current one.

Messages are searched as they are stored (a reply's Markdown source, before
rendering), so a reply not mounted yet (see chat.ui.widgets.conversation_view)
is searched like the others. The text is matched literally and without regard
to case: a query is never a pattern, and never markup.

Only counts are kept for the whole conversation: where each occurrence lies is
worked out for the messages drawn (`match_spans`). A one-letter query in a
2,000-message conversation occurs some 100,000 times; counting them takes a
few tens of milliseconds, an object for each several times as long.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field


def _pattern(query: str) -> re.Pattern[str]:
    # re.IGNORECASE compares one character at a time, so the offsets are those
    # of the text itself (str.casefold would turn "ß" into "ss" and shift them).
    return re.compile(re.escape(query), re.IGNORECASE)


def match_spans(text: str, query: str) -> list[tuple[int, int]]:
    """Where `query` occurs in `text`, ignoring case: (start, end) of each
    occurrence, not overlapping, in order. An empty query occurs nowhere."""
    if not query:
        return []
    return [match.span() for match in _pattern(query).finditer(text)]


def count_matches(texts: Sequence[str], query: str) -> list[int]:
    """How many times `query` occurs in each of `texts` (as `match_spans` finds)."""
    if not query:
        return [0] * len(texts)
    pattern = _pattern(query)
    return [len(pattern.findall(text)) for text in texts]


@dataclass(frozen=True)
class Match:
    """One occurrence: the `nth` (from 0) in the `message`-th text searched."""

    message: int
    nth: int


@dataclass
class Search:
    """The matches of one query and which of them is current."""

    query: str
    counts: list[int]
    """Matches in each text searched (`count_matches`)."""
    current: int | None = None
    """Which match is current, counted over all texts from 0; None until the
    user moves to one."""
    _ends: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._ends = list(itertools.accumulate(self.counts))

    @classmethod
    def of(cls, texts: Sequence[str], query: str) -> Search:
        return cls(query, count_matches(texts, query))

    @property
    def total(self) -> int:
        return self._ends[-1] if self._ends else 0

    @property
    def current_match(self) -> Match | None:
        if self.current is None:
            return None
        message = bisect.bisect_right(self._ends, self.current)
        before = self._ends[message - 1] if message else 0
        return Match(message, self.current - before)

    def step(self, step: int) -> Match | None:
        """Move to the next (`step` 1) or previous (-1) match, wrapping at
        either end; from none, the first (or the last). None without matches."""
        total = self.total
        if not total:
            self.current = None
        elif self.current is None:
            self.current = 0 if step > 0 else total - 1
        else:
            self.current = (self.current + step) % total
        return self.current_match

    def counter(self) -> str:
        """`3 of 17`, `17 matches` before moving to one, or `no matches`."""
        total = self.total
        if not self.query:
            return ""
        if total == 0:
            return "no matches"
        if self.current is None:
            return "1 match" if total == 1 else f"{total:,} matches"
        return f"{self.current + 1:,} of {total:,}"

    def redo(self, texts: Sequence[str]) -> None:
        """Search `texts` again (the messages changed: a reply ended, another
        branch is shown); the current match stays the same occurrence where it
        still exists, else the one now at its place."""
        current, was = self.current_match, self.current
        self.counts = count_matches(texts, self.query)
        self.__post_init__()
        total = self.total
        if current is None or was is None or not total:
            self.current = None
        elif current.message < len(self.counts) and current.nth < self.counts[current.message]:
            before = self._ends[current.message - 1] if current.message else 0
            self.current = before + current.nth
        else:
            self.current = min(was, total - 1)
