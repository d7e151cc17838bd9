"""The canary: a payload of every kind of terminal escape, and a check that
none of it came out of kvchat inside an escape sequence.

Each untrusted source (a conversation title, a message, a theme or preset
file, a file name, a model name from a server or a GGUF, a reply) gets the
payload with its own tag. Whatever kvchat writes to the terminal is then read
as a terminal would read it: if any escape sequence in the output carries a
piece of the payload (a title change, a clipboard write, a hyperlink, a
colour, a device control string), or a C1 control, a bidirectional override,
a raw carriage return, backspace or NUL from the payload reaches the
terminal, the check names it. The tag itself is plain text and must be seen:
that proves the source was really drawn or printed.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

MARK = "CANARY"
CSI_MARK = "4242"
CLIPBOARD_MARK = base64.b64encode(MARK.encode()).decode()  # "Q0FOQVJZ"
VISIBLE = "canary"
"""Marks the payload's plain-text pieces, which are allowed on screen."""


def payload(tag: str) -> str:
    """Text that, drawn raw, would change the title, write the clipboard, open
    a hyperlink, colour the screen, clear it, start device control strings,
    reorder the line and move the cursor back; and would run as Textual
    markup."""
    return (
        f"{tag} [b]bold[/b] [@click=app.quit]q[/]"
        f"\x1b]0;{MARK}-title\x07"
        f"\x1b]52;c;{CLIPBOARD_MARK}\x07"
        f"\x1b]8;;{MARK}.invalid\x1b\\link\x1b]8;;\x1b\\"
        f"\x1b[{CSI_MARK}m\x1b[2J"
        f"\x1bP{MARK}\x1b\\"
        f"\x9b{CSI_MARK}m\x9d0;{MARK}\x9c"
        f"\u202e{VISIBLE}-rtl\u2066"
        f"\r{VISIBLE}-cr\x08{VISIBLE}-bs\x00{VISIBLE}-nul\x07"
        f" {tag}-end"
    )


# What a terminal reads as one escape sequence (7-bit forms; C1 forms are
# refused outright below).
_SEQUENCE = re.compile(
    r"\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # two-character escapes
)
_C1 = re.compile("[\x80-\x9f]")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_C0 = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_RAW_CONTROLS = (f"\r{VISIBLE}-cr", f"\x08{VISIBLE}-bs", f"\x00{VISIBLE}-nul")
_CLIPBOARD = re.compile(r"\x1b\]52;c;([A-Za-z0-9+/=]*)(?:\x07|\x1b\\)")


@dataclass(frozen=True)
class Leak:
    what: str
    around: str

    def __str__(self) -> str:
        return f"{self.what}: {self.around!r}"


def leaks(output: bytes) -> list[Leak]:
    """Every piece of a payload that reached the terminal as a terminal acts
    on it, in `output` (what kvchat wrote, as bytes)."""
    text = output.decode("utf-8", "replace")
    found: list[Leak] = []
    for match in _SEQUENCE.finditer(text):
        sequence = match.group()
        if _CLIPBOARD.fullmatch(sequence):
            continue  # kvchat's own copy: its text is checked below
        if MARK in sequence or CSI_MARK in sequence:
            found.append(Leak("an escape sequence from the payload", sequence))
    for copied in clipboard_writes(output):
        if copied == MARK or any(p.search(copied) for p in (_C1, _BIDI, _C0)):
            found.append(Leak("a control character copied to the clipboard", copied[:80]))
    for pattern, what in ((_C1, "a C1 control"), (_BIDI, "a bidirectional override")):
        for match in pattern.finditer(text):
            start = max(0, match.start() - 20)
            found.append(Leak(what, text[start : match.end() + 20]))
    for raw in _RAW_CONTROLS:
        if raw in text:
            found.append(Leak("a raw control character", raw))
    return found


def clipboard_writes(output: bytes) -> list[str]:
    """The texts written to the clipboard (OSC 52) in `output`, decoded."""
    text = output.decode("utf-8", "replace")
    return [base64.b64decode(data).decode("utf-8", "replace") for data in _CLIPBOARD.findall(text)]


def assert_no_leak(output: bytes, *tags: str) -> None:
    """No payload leaked, and each tag was shown (so its source was exercised)."""
    found = leaks(output)
    assert not found, "\n".join(str(leak) for leak in found[:20])
    text = output.decode("utf-8", "replace")
    missing = [tag for tag in tags if tag not in text]
    assert not missing, f"never shown: {missing}"
