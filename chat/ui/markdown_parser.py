"""The Markdown parser every reply is parsed with, made once."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


@functools.cache
def markdown_parser() -> MarkdownIt:
    """One parser for every reply. Markdown's default builds a new one for each
    update and append, many times a second while a reply streams
    (docs/performance.md). A parser keeps no state between documents."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")  # what Markdown uses by default
    # Markdown parses in a thread pool, several replies at once when a
    # conversation opens; markdown-it builds its rule lists on first use, and a
    # thread that reads them half built fails ("none of the block rules
    # matched"). Built here, once, they are only read from then on.
    parser.parse("*x*")
    return parser
