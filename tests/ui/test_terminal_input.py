"""The terminal input parser that hands typed text over in runs
(chat.ui.terminal_input): what it makes of what a terminal sends."""

from __future__ import annotations

import time

from textual import constants, events
from textual._xterm_parser import XTermParser

from chat.ui.terminal_input import RunParser, TypedText


def parsed(data: str) -> list[tuple[str, str | None]]:
    """Each event as (kind, key or text)."""
    out: list[tuple[str, str | None]] = []
    for event in RunParser().feed(data):
        if isinstance(event, TypedText):
            out.append(("typed", event.text))
        elif isinstance(event, events.Key):
            out.append(("key", event.key))
        elif isinstance(event, events.Paste):
            out.append(("paste", event.text))
    return out


def test_characters_read_together_are_one_run_in_order_with_other_keys() -> None:
    data = "hello world\x1b[Aabc\x7fxy\n\x1b[200~pasted\x1b[201~zz\x11"
    assert parsed(data) == [
        ("typed", "hello world"),
        ("key", "up"),
        ("typed", "abc"),
        ("key", "backspace"),
        ("typed", "xy"),
        ("key", "ctrl+j"),
        ("paste", "pasted"),
        ("typed", "zz"),
        ("key", "ctrl+q"),
    ]


def test_a_character_read_alone_is_the_key_textual_makes_of_it() -> None:
    for character in "a Zé€ß漢😀~!@#$%^&*()_+-=[]{};:'\",.<>/?\\|`1":
        (mine,) = RunParser().feed(character)
        (textuals,) = XTermParser().feed(character)
        assert isinstance(mine, events.Key) and isinstance(textuals, events.Key)
        assert (mine.key, mine.character) == (textuals.key, textuals.character)


def test_a_run_as_keys_is_what_textual_makes_of_each_character() -> None:
    text = "Le café, 3 €!"
    textuals = [event for character in text for event in XTermParser().feed(character)]
    keys = TypedText(text).as_keys()
    assert [(k.key, k.character) for k in keys] == [(k.key, k.character) for k in textuals]


def test_escape_sequences_and_alt_keys_stay_keys() -> None:
    assert parsed("ab\x1b[1;5Ccd") == [("typed", "ab"), ("key", "ctrl+right"), ("typed", "cd")]
    # Escape then a letter is Alt+letter, known once the escape delay has passed.
    parser = RunParser()
    assert list(parser.feed("\x1bx")) == []
    time.sleep(constants.ESCAPE_DELAY + 0.05)
    assert [(event.key, event.character) for event in parser.tick()] == [("alt+x", "x")]
