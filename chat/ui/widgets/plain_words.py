"""What a Markdown paragraph's text gains when plain words are added to it,
said without parsing the Markdown again.

A streaming reply's last paragraph gets a few words at most deliveries, and
the answer parsed its text again each time to learn how the paragraph reads
now (about a third of a delivery's cost: docs/performance.md, "Plain words
added without a parse"). Most of those words change nothing but the end of
the text: no character in them, nor in the word they continue, can open,
close or join a Markdown construct. `words_added` says what the paragraph's
text gains then, exactly as a parse would show it, and None whenever only a
parse can say.

It is exact where every one of these holds, and refuses otherwise:
- Nothing new begins a line: `added` holds no line break, and the text it
  continues does not end one. Whether a line starts a list, a heading, a
  quote or a fence is decided at its start, so the line continued must begin
  with a word that begins with a letter or digit and is not an ordered
  list's marker (`1.`, `2)`): letters and digits begin no other kind of
  line, and lines made of marks only (a rule, a setext underline, a table's
  delimiter row) cannot begin with one.
- No inline construct can change: the characters added, and the word they
  continue when they do not begin with a space, are letters, digits, spaces
  (" " only: Textual counts lines as Python splits them, at more than
  `\n`) and punctuation that Markdown gives no meaning to (no emphasis, code,
  link, image, HTML, entity, escape, strike or table marks). A word that
  continues across the addition is checked whole, so a mark at the end of
  the text (an emphasis's `*`) is judged with what follows it.
- No link can appear: with linkify on, `example.com`, `user@host` and
  `https://` turn into links; `.` and `:` are allowed only at a word's end
  (a sentence's full stop, a colon), `@` and `/` not at all. The word that
  continues across the addition is checked whole here too.
- Markdown takes the spaces off a paragraph's end and joins runs of spaces
  into one (Textual's Markdown does, drawing a paragraph's text): the spaces
  at the end of the text before are added back in front of the new words,
  the runs joined, and the end trimmed again.
"""

from __future__ import annotations

import re
import unicodedata

PLAIN_ASCII = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,;'\"!?()-%#$+=^{}"
)
"""ASCII that Markdown (CommonMark, GFM tables and strikethrough, linkify)
gives no meaning within a line. `.` and `:` are allowed only at a word's end."""
ENDS_A_WORD = frozenset(".:")
ORDERED_MARKER = re.compile(r"[0-9]{1,9}[.)]")
SPACES = re.compile(r"\s+")


def words_added(source: str, added: str) -> str | None:
    """What the text of the paragraph that `source` ends with gains when
    `added` is appended to `source`: `added` with the spaces Markdown took
    off the paragraph's end in front, runs of spaces joined, the end trimmed
    ("" when only spaces were added). None when Markdown might read the
    addition otherwise, or read the text before it otherwise.

    `source` must end in a paragraph that Markdown parsed as the last block,
    the text drawn for it being what a parse gives."""
    if "\n" in added or not source or source.endswith("\n"):
        return None
    # Only the text's end is read: a delivery costs the same however long
    # the reply grew (a regular expression searched from the start did not).
    end = len(source)
    while end and source[end - 1].isspace():
        end -= 1
    trimmed = source[end:]  # what Markdown took off the end
    if trimmed.strip(" "):
        return None  # a tab or another space than " ": only spaces are put back
    if not _line_kind_is_settled(source[source.rfind("\n") + 1 :] + added):
        return None
    continued = "" if trimmed or added.startswith(" ") else source.rsplit(maxsplit=1)[-1]
    if not _plain(continued + added):
        return None
    return SPACES.sub(" ", trimmed + added).rstrip()


def _line_kind_is_settled(line: str) -> bool:
    """The line's first word begins with a letter or digit and is no ordered
    list's marker: what comes after it cannot change what kind of line it is
    (a later delivery that makes the first word a marker is refused then)."""
    first = line.lstrip(" ").partition(" ")[0]
    return bool(first) and first[0].isalnum() and not ORDERED_MARKER.fullmatch(first)


def _plain(text: str) -> bool:
    """Every character of `text` means nothing to Markdown where it stands:
    plain ASCII, letters, digits, punctuation and symbols beyond ASCII, and
    `.` or `:` only where a word ends (before a space, or at the end)."""
    last = len(text) - 1
    for at, char in enumerate(text):
        if char in PLAIN_ASCII:
            continue
        if char in ENDS_A_WORD:
            if at == last or text[at + 1] == " ":
                continue
            return False
        if char.isascii() or unicodedata.category(char)[0] not in "LNPS":
            return False
    return True
