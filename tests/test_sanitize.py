"""Model output never reaches the terminal with escape sequences or controls."""

from __future__ import annotations

import pytest

from chat.engine.reply_text import ReplyText
from chat.sanitize import TerminalSanitizer, sanitize

HOSTILE = [
    ("red \x1b[31mtext\x1b[0m", "red text"),
    ("title\x1b]0;pwned\x07 after", "title after"),
    ("clip\x1b]52;c;ZXZpbA==\x1b\\ board", "clip board"),
    ("link \x1b]8;;http://evil\x1b\\here\x1b]8;;\x1b\\", "link here"),
    ("reset\x1bc now", "reset now"),
    ("charset\x1b(B ok", "charset ok"),
    ("dcs\x1bPq#0;2;0;0;0\x1b\\ end", "dcs end"),
    ("c1 csi\x9b2J cleared", "c1 csi cleared"),
    ("c1 osc\x9d0;x\x9c done", "c1 osc done"),
    ("bell\x07 backspace\x08 cr\r del\x7f", "bell backspace cr del"),
    ("keeps\ttabs\nand newlines", "keeps\ttabs\nand newlines"),
    ("unicode é 漢字 😀 stays", "unicode é 漢字 😀 stays"),
    ("unterminated \x1b]0;title\nnext line", "unterminated \nnext line"),
    ("bidi \u202eexe.txt\u202c and \u2066isolate\u2069", "bidi exe.txt and isolate"),
]


@pytest.mark.parametrize(("raw", "clean"), HOSTILE)
def test_sanitize_removes_escapes_and_controls(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


@pytest.mark.parametrize(("raw", "clean"), HOSTILE)
def test_sequences_split_across_every_boundary(raw: str, clean: str) -> None:
    # Feed one character at a time: the worst case of token boundaries.
    sanitizer = TerminalSanitizer()
    assert "".join(sanitizer.feed(char) for char in raw) == clean


def test_no_escape_survives_any_split() -> None:
    raw = "a\x1b[1;31mb\x1b]8;;x\x07c\x9b0md"
    for cut in range(len(raw) + 1):
        sanitizer = TerminalSanitizer()
        out = sanitizer.feed(raw[:cut]) + sanitizer.feed(raw[cut:])
        assert out == "abcd"


def test_reply_text_joins_utf8_split_across_tokens() -> None:
    reply = ReplyText()
    data = "é😀漢".encode()
    pieces = [reply.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(pieces) == "é😀漢"
    assert all("\ufffd" not in piece for piece in pieces)


def test_reply_text_holds_back_a_possible_stop_sequence() -> None:
    reply = ReplyText(stop=["</end>"])
    assert reply.feed(b"Hello </") == "Hello "
    assert reply.feed(b"en") == ""
    assert reply.feed(b"d> ignored") == ""
    assert reply.stopped
    assert reply.text == "Hello "


def test_reply_text_releases_a_false_alarm() -> None:
    reply = ReplyText(stop=["</end>"])
    assert reply.feed(b"a </") == "a "
    assert reply.feed(b"b") == "</b"
    assert reply.flush() == ""
    assert reply.text == "a </b"


def test_reply_text_sanitizes() -> None:
    reply = ReplyText()
    out = reply.feed(b"x\x1b[") + reply.feed(b"2Jy")
    assert out == "xy"


def test_sanitize_line_makes_one_line() -> None:
    from chat.sanitize import sanitize_line

    assert sanitize_line("a\n b\t\x1b[31mc\u202e  d ") == "a b c d"


def test_show_controls_shows_bidi_overrides() -> None:
    from chat.sanitize import show_controls

    assert show_controls("a\u202eb\x1bc") == "a<U+202E>b\u241bc"
