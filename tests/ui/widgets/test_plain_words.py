"""Plain words added to a paragraph's Markdown: what its text gains, said
without a parse, is what a parse gives, or nothing is said."""

from __future__ import annotations

import random

import pytest
from textual.content import Content
from textual.widgets.markdown import MarkdownBlock

from chat.ui.markdown_parser import markdown_parser
from chat.ui.widgets.plain_words import words_added

PROSE = (
    "The keeper logged the tide, the wind; and a ship! Was it (far) off? "
    'She said "yes" at 5% + $3 = {more}. Note: the end is near— '
    "café déjà vu, 灯台の守り人, ünïcode… and emoji 🌊 too"
)
"""Text whose words a parse takes as written: the fast way should take most."""

MARKS = [
    "*", "**", "_", "`", "~~", "[", "]", "(", ")", "<", ">", "&amp;", "&", "\\", "|",
    "!", "#", "- ", "1. ", "2) ", "10.", "> ", "```", "---", "===", "    ",
    "http://", "https://x.org", "www.", ".com", "example.com", "a@b.co", "@",
    ":", ".", "...", "/", "e.g.", "3.5", "\t", "\u00a0", "\u200d", "\u0301", "  ",
    "\n", "\n\n", "  \n", "\\\n", "x", "word", " ", "é", "—", "🌊", "１.",
]  # fmt: skip
"""Pieces that may make Markdown read the text otherwise."""


def paragraph(source: str) -> Content | None:
    """The text of `source` when a parse makes it one paragraph (as Textual's
    Markdown draws it), else None."""
    tokens = markdown_parser().parse(source)
    if [token.type for token in tokens] != ["paragraph_open", "inline", "paragraph_close"]:
        return None
    return MarkdownBlock._token_to_content(None, tokens[1])  # type: ignore[arg-type]


def shown(content: Content) -> tuple[str, list[tuple[int, int, str]]]:
    """Text and styles (Content's own == compares the text only)."""
    return content.plain, [(span.start, span.end, str(span.style)) for span in content.spans]


def check(source: str, added: str) -> bool:
    """Where `source` is one paragraph and `words_added` says what it gains,
    that is what a parse of the whole gives; whether it said."""
    before = paragraph(source)
    if before is None:
        return False
    gained = words_added(source, added)
    if gained is None:
        return False
    after = paragraph(source + added)
    assert after is not None, (source, added)
    assert shown(before + gained) == shown(after), (source, added)
    return True


@pytest.mark.parametrize(
    ("source", "added", "gained"),
    [
        ("The keeper", " logged the tide", " logged the tide"),
        ("The keeper ", "logged", " logged"),  # the space Markdown took off, put back
        ("The keeper  ", "  logged  ", " logged"),  # runs joined, the end trimmed
        ("The keeper", "   ", ""),
        ("It ended.", " Then", " Then"),
        ("Note", ": the end", ": the end"),
        ("Hello", ", world", ", world"),
        ("Hello", " world", " world"),  # the line's first word now complete
    ],
)
def test_plain_words_gain_what_a_parse_shows(source: str, added: str, gained: str) -> None:
    assert words_added(source, added) == gained
    assert check(source, added)


@pytest.mark.parametrize(
    ("source", "added"),
    [
        ("A *word", "s here*"),  # closes an emphasis
        ("A *word*", "s"),  # the mark is judged with what follows it
        ("see example", ".com"),  # a link appears
        ("see example.", "com"),
        ("mail me", "@home"),
        ("see http", "://x"),
        ("Line", "\nnext"),  # a line break
        ("Line\n", "next"),
        ("1", ". item"),  # the line becomes a list
        ("use `code", " here`"),
        ("an &amp", ";"),
        ("A\u00a0", "b"),  # a space other than " " was trimmed
    ],
)
def test_additions_markdown_might_read_otherwise_are_refused(source: str, added: str) -> None:
    assert words_added(source, added) is None


@pytest.mark.parametrize("above", ["", "A paragraph\n", "A paragraph\nof two lines\n"])
def test_a_line_that_may_become_another_kind_is_refused(above: str) -> None:
    """A line begun with a list's marker (`1.`, `-`, `*`, `+`), a heading's,
    a quote's or a fence's is refused, whatever is added; a parse agrees
    wherever words are said to be added."""
    starts = ["1", "10", "0", "2", "-", "*", "+", "#", ">", "Hello", "x1"]
    ends = [". item", ") item", ".", ")", " item", "0. item", "- item", "## x", " x", "x"]
    refused = 0
    for start in starts:
        for end in ends:
            source = above + start
            if paragraph(source) is None:
                continue
            refused += not check(source, end)
    assert refused >= 20


def test_what_is_said_is_always_what_a_parse_gives() -> None:
    """Random texts of plain words and Markdown's marks, cut anywhere: every
    time `words_added` says what a paragraph gains, a parse of the whole
    agrees, text and styles; and for plain prose it says so most of the time."""
    rng = random.Random(33)
    words = [*PROSE.split(" "), "1", "2", "10", "0"]
    said = tried = 0
    for _ in range(3000):
        pieces = []
        for _ in range(rng.randint(2, 14)):
            if rng.random() < 0.3:
                pieces.append(rng.choice(MARKS))
            else:
                pieces.append(rng.choice(words) + rng.choice(["", " ", " ", "  "]))
        text = "".join(pieces)
        cut = rng.randint(1, len(text) - 1) if len(text) > 1 else 1
        more = rng.randint(cut, len(text))
        tried += 1
        said += check(text[:cut], text[cut:more])
    assert said > tried / 5  # the check bites: many were said, each one checked

    # Prose streamed a few characters at a time, as a reply streams.
    source, said, deliveries = PROSE[:4], 0, 0
    for start in range(4, len(PROSE), 4):
        piece = PROSE[start : start + 4]
        deliveries += 1
        said += check(source, piece)
        source += piece
    assert said > deliveries * 0.6
