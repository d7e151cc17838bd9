"""A streaming code block's lines: the lines added since the last highlight
are highlighted after a few lines of context, as the whole code highlighted
draws them, or the whole is highlighted."""

from __future__ import annotations

import random

from textual.content import Content
from textual.highlight import highlight

from chat.ui.widgets.code_lines import grown, key, plain_line, with_new_lines_highlighted

PROGRAM = '''import sys


class Keeper:
    """The keeper of a lighthouse.

    He logs the tide, the wind
    and every ship that passes.
    """

    def __init__(self, name: str) -> None:
        self.name = name  # who keeps the light
        self.log: list[str] = []

    def note(self, entry: str) -> None:
        text = f"""{self.name}:
    {entry}"""
        self.log.append(text)


def main() -> int:
    keeper = Keeper("Ada")
    for hour in range(3):
        keeper.note(f"hour {hour}: calm")  # a comment
    print("\\n".join(keeper.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())'''
"""Python with strings and docstrings that run across lines."""


def lines_of(content: Content) -> list[Content]:
    return content.split("\n", allow_blank=True)


def python(code: str) -> Content:
    return highlight(code, language="python")


def test_new_lines_are_highlighted_as_the_whole_code_is_or_the_whole_is_asked_for() -> None:
    rng = random.Random(7)
    spliced = 0
    for _ in range(300):
        cut = rng.randint(1, len(PROGRAM) - 1)
        before = PROGRAM[:cut]
        # Drawn so far: the code up to the cut highlighted, then plain what followed.
        end = rng.randint(cut, len(PROGRAM))
        drawn = grown(lines_of(python(before)), PROGRAM[cut:end])
        stable = before.count("\n")  # the cut's own line grew after it was highlighted
        new_lines = with_new_lines_highlighted(drawn, stable, PROGRAM[:end], python)
        if new_lines is None:
            continue
        spliced += 1
        whole = lines_of(python(PROGRAM[:end]))
        assert [key(line) for line in new_lines] == [key(line) for line in whole], cut
    assert spliced > 150


def test_a_string_open_across_the_context_is_found_and_refused() -> None:
    start = PROGRAM.index("    He logs")
    before = PROGRAM[:start]  # the docstring opened above the new lines
    end = PROGRAM.index("    def __init__")
    drawn = grown(lines_of(python(before)), PROGRAM[start:end])
    stable = before.count("\n")
    assert with_new_lines_highlighted(drawn, stable, PROGRAM[:end], python) is None


def test_text_added_is_drawn_plain_after_the_lines() -> None:
    lines = grown([plain_line("def f():"), plain_line("    re")], "turn 1\n\nx = 2")
    assert [line.plain for line in lines] == ["def f():", "    return 1", "", "x = 2"]
    assert lines[0] is not None and lines[2].spans == []
