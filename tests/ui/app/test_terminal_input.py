"""The terminal input parser that hands typed text over in runs
(chat.ui.terminal_input): what it makes of what a terminal sends."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual import events
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


def ticked(parser: RunParser, until: Callable[[list[events.Event]], bool]) -> list[events.Event]:
    """What the parser's ticks give until `until` holds of it: the input thread
    ticks the parser while no byte comes, and what it held back comes out once
    Textual's escape delay has passed. Fails after two seconds."""
    seen: list[events.Event] = []
    deadline = time.monotonic() + 2
    while not until(seen):
        assert time.monotonic() < deadline, seen
        time.sleep(0.01)  # a poll: the parser is ticked again
        seen += parser.tick()
    return seen


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
    seen = ticked(parser, bool)
    # It types nothing (chat.ui.terminal_input): its binding runs.
    assert [(event.key, event.character) for event in seen] == [("alt+x", None)]  # type: ignore[attr-defined]


def test_a_paste_holding_escapes_and_controls_stays_text() -> None:
    # Textual's own parser hands an ESC in a paste over as keys: the BEL would
    # open the editor (Ctrl+G) and the \x11 quit the app (Ctrl+Q).
    data = (
        "a\x1b[200~one\x07two\x11three\x1b]0;title\x07four\x1b[31m\r\nfive\x9b2J\u202esix\x1b[201~b"
    )
    assert parsed(data) == [
        ("key", "a"),
        ("paste", "onetwothreefour\nfivesix"),
        ("key", "b"),
    ]
    lines = parsed("\x1b[200~line 1\rline 2\r\nline 3\x1b[201~")
    assert lines == [("paste", "line 1\nline 2\nline 3")]


def test_a_paste_split_across_reads_is_one_paste() -> None:
    data = "x\x1b[200~first\x1b[1mpart, second part\x1b[201~y"
    for cut in range(1, len(data)):
        parser = RunParser()
        events_seen = [*parser.feed(data[:cut]), *parser.feed(data[cut:])]
        pastes = [event.text for event in events_seen if isinstance(event, events.Paste)]
        assert pastes == ["firstpart, second part"], cut


def test_the_start_of_a_paste_marker_alone_is_given_back_as_keys() -> None:
    # What a read ends with that could begin a paste waits for the next read;
    # when none comes, it is what Textual's parser makes of it.
    parser = RunParser()
    seen = [*parser.feed("ab\x1b[20")]
    assert [event.text for event in seen if isinstance(event, TypedText)] == ["ab"]

    def given_back(ticks: list[events.Event]) -> str:
        return "".join(e.character or "" if isinstance(e, events.Key) else e.text for e in ticks)  # type: ignore[attr-defined]

    assert given_back(ticked(parser, lambda ticks: len(given_back(ticks)) >= 3)) == "[20"


def test_escape_alone_at_the_end_of_a_read_is_the_escape_key() -> None:
    parser = RunParser()
    assert list(parser.feed("\x1b")) == []
    assert [event.key for event in ticked(parser, bool)] == ["escape"]  # type: ignore[attr-defined]


class WriterThread:
    """Stands in for Textual's writer thread: what it is handed, piece by piece."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def write(self, text: str) -> None:
        self.pieces.append(text)


async def test_a_frame_goes_to_the_writer_thread_in_one_piece() -> None:
    """Textual writes a synchronized frame as its start, the frame and its
    end; the writer thread wakes and writes to the terminal for each piece
    handed to it. kvchat's driver hands over the frame whole, and what is
    written outside a frame as it comes."""
    from textual._ansi_sequences import SYNC_END, SYNC_START  # Textual's own
    from textual.app import App

    from chat.ui.terminal_input import TypingDriver

    driver = TypingDriver(App())
    writer = WriterThread()
    driver._writer_thread = writer  # type: ignore[assignment]
    driver.write("\x1b[?25l")  # outside a frame: at once
    assert writer.pieces == ["\x1b[?25l"]
    for piece in (SYNC_START, "\x1b[1;1Hhello", "\x1b[2;1Hworld", SYNC_END):
        driver.write(piece)
    assert writer.pieces == ["\x1b[?25l", SYNC_START + "\x1b[1;1Hhello\x1b[2;1Hworld" + SYNC_END]
    driver.write(SYNC_START)
    assert len(writer.pieces) == 2  # held until its end
    driver.write(SYNC_END)
    assert writer.pieces[-1] == SYNC_START + SYNC_END
    driver.write("after")
    assert writer.pieces[-1] == "after"
