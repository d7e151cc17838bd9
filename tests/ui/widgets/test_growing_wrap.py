"""A growing text's rows, wrapped again from the last row only, are the rows
Textual wraps the whole text to: same text, styles and place, at every step."""

from __future__ import annotations

import random

import pytest
from textual.content import Content, Span

from chat.ui.widgets.growing_wrap import GrowingWrap, RowKey

PIECES = [
    "a",
    "the",
    "keeper",
    "lighthouse",
    "x" * 30,  # longer than a row: cut (folded) over rows
    "日本語テキスト",  # two cells a character
    "🙂",
    "  ",
    "\n",
    "end.",
    "ok,",
    "supercalifragilistic" * 3,
]


def textual_rows(text: Content, width: int) -> list[RowKey]:
    """The rows Textual draws `text` as (its private wrap: the one it draws with)."""
    return [
        (line.y, line.x, line.content.plain, tuple(line.content.spans))
        for line in text._wrap_and_format(width)
    ]


@pytest.mark.parametrize("seed", range(4))
def test_rows_grown_a_piece_at_a_time_are_the_rows_of_the_whole_text(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        width = rng.choice([5, 8, 13, 20, 40, 117])
        wrap = GrowingWrap()
        text, spans = "", []
        for _ in range(rng.randint(1, 25)):
            piece = "".join(
                rng.choice(PIECES) + rng.choice(["", " ", " ", "  "])
                for _ in range(rng.randint(0, 3))
            )
            if rng.random() < 0.3:  # a word split between two deliveries
                piece = piece[: rng.randint(0, len(piece))]
            start = len(text)
            text += piece
            if rng.random() < 0.2 and len(piece) > 1:
                spans.append(Span(start, start + len(piece) // 2, "bold"))
            content = Content(text, list(spans))
            rows = wrap.rows(content, width)
            assert [row.key for row in rows] == textual_rows(content, width), (text, width)
            assert all(row.start == text.rfind("\n", 0, row.start) + 1 + row.x for row in rows)


def test_only_the_rows_from_the_last_word_on_are_wrapped_again() -> None:
    wrap = GrowingWrap()
    words = "The keeper logged the tide, the wind and a passing ship. " * 6
    first = wrap.rows(Content(words), 40)
    grown = wrap.rows(Content(words + "Then he slept."), 40)
    assert wrap.kept == len(first) - 1
    assert grown[: wrap.kept] == first[: wrap.kept]
    # Styles changed before the end (a closing `**` turns words bold): all again.
    wrap.rows(Content(words + "Then", [Span(0, 3, "bold")]), 40)
    assert wrap.kept == 0
