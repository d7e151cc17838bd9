"""Code added to a streaming fenced code block, said without a Markdown parse.

While a reply streams a code block, each delivery adds a few characters to
its code. Markdown's way (and kvchat's, before) parses the block's whole text
again from its opening fence to learn what the code now is: a cost that grows
with every line of the block, at each delivery. But in a fenced block opened
at the line's start, nothing but a closing fence ends the code, and each line
of it is the code as written (CommonMark: only a fence's own indentation is
taken off its lines). So unless the addition could be or start a closing
fence, the code is the text after the opening line, and `grown_fence` says so
without a parse. It refuses (None: parse) wherever that might not hold.
"""

from __future__ import annotations

import re
from typing import NamedTuple

OPENING = re.compile(r"(`{3,}|~{3,})[^\n]*\n")
"""An opening fence at the line's start, its info string, and its line's end."""
MAY_CLOSE = re.compile(r"\n {0,3}[`~]")
"""A line that begins (within 3 spaces) with a fence's character: it might
close the block, as it is or with what comes next."""
NORMALISED = ("\r", "\0")
"""Characters the parser changes before it reads the text."""


class GrownFence(NamedTuple):
    code: str
    """The block's raw code (as the parser gives it, before its end is trimmed)."""
    lines: int
    """The lines the block's source takes, as the parser maps a block: a last
    line without its newline counts unless it is blank so far."""


def grown_fence(block_source: str, added: str) -> GrownFence | None:
    """A fenced code block whose source so far (from its opening fence on)
    is `block_source`, once `added` follows it; None where only a parse can
    tell (the addition may close the block, or the block is not one this can
    read)."""
    opening = OPENING.match(block_source)
    text = block_source + added
    if opening is None or any(mark in text for mark in NORMALISED):
        return None
    code = text[opening.end() :]
    if MAY_CLOSE.search("\n" + code):
        return None
    last_line = text[text.rfind("\n") + 1 :]
    return GrownFence(code, text.count("\n") + (1 if last_line.strip(" \t") else 0))
