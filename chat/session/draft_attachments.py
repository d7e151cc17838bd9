"""The files attached to the message being written, and `@path` in its text.

A file is attached two ways: picked (the palette's "Attach a file…"), or
named in the text as `@path` (`@"a name with spaces.txt"` when the path has
spaces). `@word` attaches only when it names a file: an e-mail address, a
`@mention` or a folder stays plain text. A named file that exists but cannot
be attached (binary, unreadable, too large) is a problem the user is told
about before anything is sent. Paths are relative to the folder kvchat was
started in; `~` is the home folder. No Textual here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chat import paths
from chat.conversations.attachments import (
    Attachment,
    AttachmentError,
    display_name,
    read_attachment,
    resolve_path,
)

# `@` at the start or after white space (so `me@example.com` is not one), then
# a quoted path or a run of non-space characters.
_MENTION = re.compile(r'(?<!\S)@(?:"([^"\n]*)"?|(\S*))')
# Punctuation that ends a sentence rather than a path: "see @notes.txt."
_TRAILING = ".,;:!?)]}'\""
MAX_COMPLETIONS = 50


@dataclass(frozen=True)
class Mention:
    """`@path` in the text: `start` is the `@`, `end` just after the path."""

    start: int
    end: int
    path: str


def _mention(match: re.Match[str]) -> Mention:
    path = match[1] if match[1] is not None else match[2]  # quoted, or not
    return Mention(match.start(), match.end(), path)


def find_mentions(text: str) -> list[Mention]:
    return [mention for match in _MENTION.finditer(text) if (mention := _mention(match)).path]


def mention_before(line: str, column: int) -> Mention | None:
    """The `@path` (perhaps only `@`, or an unclosed `@"...`) that ends at
    `column` of `line`: the one being typed, which completion extends."""
    for match in _MENTION.finditer(line[:column]):
        if match.end() == column:
            return _mention(match)
    return None


def mention_text(path: str) -> str:
    """`@path`, quoted when the path holds white space."""
    return f'@"{path}"' if any(char.isspace() for char in path) else f"@{path}"


def complete_path(partial: str, base: Path | None = None) -> list[str]:
    """The paths that `partial` may be completed to, sorted: the entries of its
    folder whose names start with what follows the last `/`; a folder ends in
    `/`. Hidden entries only when that part starts with a dot."""
    folder_text, _, start = partial.rpartition("/")
    if folder_text or partial.startswith("/"):
        folder_text += "/"
    folder = resolve_path(folder_text or ".", base)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    names = []
    for entry in entries:
        if not entry.name.startswith(start) or (
            entry.name.startswith(".") and not start.startswith(".")
        ):
            continue
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        names.append(entry.name + ("/" if is_dir else ""))
    return [folder_text + name for name in sorted(names, key=str.lower)[:MAX_COMPLETIONS]]


def shared_prefix(paths: list[str]) -> str:
    """The text every one of `paths` starts with (character by character)."""
    if not paths:
        return ""
    first, last = min(paths), max(paths)
    length = 0
    while length < min(len(first), len(last)) and first[length] == last[length]:
        length += 1
    return first[:length]


def relative_name(path: Path, base: Path | None = None) -> str:
    """How the picker names a file: relative to `base` when inside it, else
    from the home folder (`~/...`) when inside that, else in full."""
    base = base or paths.working_folder()
    for root, prefix in ((base, ""), (Path.home(), "~/")):
        try:
            return prefix + str(path.relative_to(root))
        except ValueError:
            continue
    return str(path)


@dataclass
class Attached:
    """What the draft attaches now (`attachments`) and why some named files
    cannot be (`problems`, sentences for the user)."""

    attachments: list[Attachment] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    mentioned: set[str] = field(default_factory=set)
    """Names of the attachments that come from `@path` in the text."""


class DraftAttachments:
    """The attachments of the message being written: files picked, and files
    named by `@path` in the text (read again only when they change)."""

    def __init__(self, base: Path | None = None) -> None:
        self.base = base
        self.picked: list[Attachment] = []
        self._read: dict[Path, tuple[tuple[int, int], Attachment | AttachmentError]] = {}
        """A file read, by path: its (mtime, size) then, and what reading it gave."""

    def pick(self, path_text: str) -> Attachment:
        """Attach the file at `path_text`; raises `AttachmentError`."""
        attachment = read_attachment(path_text, self.base)
        self.picked = [a for a in self.picked if a.name != attachment.name] + [attachment]
        return attachment

    def put_back(self, attachments: Sequence[Attachment], text: str) -> None:
        """A message's attachments come back to the draft (the message is edited,
        or did not fit): those its text does not name again are picked ones."""
        named = {display_name(mention.path) for mention in find_mentions(text)}
        for attachment in attachments:
            if attachment.name not in named and attachment not in self.picked:
                self.picked.append(attachment)

    def remove(self, attachment: Attachment) -> None:
        self.picked = [a for a in self.picked if a != attachment]

    def clear(self) -> None:
        self.picked = []
        self._read.clear()

    def resolve(self, text: str) -> Attached:
        """The attachments a message with `text` is sent with: files named in the
        text, in order, then files picked (each once)."""
        attached = Attached()
        seen: set[str] = set()
        for mention in find_mentions(text):
            outcome = self._read_named(mention.path)
            if isinstance(outcome, AttachmentError):
                if str(outcome) not in attached.problems:
                    attached.problems.append(str(outcome))
            elif outcome is not None and outcome.name not in seen:
                seen.add(outcome.name)
                attached.mentioned.add(outcome.name)
                attached.attachments.append(outcome)
        for attachment in self.picked:
            if attachment.name not in seen:
                seen.add(attachment.name)
                attached.attachments.append(attachment)
        return attached

    def _read_named(self, path_text: str) -> Attachment | AttachmentError | None:
        """The file `@path_text` names (without the punctuation after it, if need
        be), or None when it names no file: it is plain text then."""
        candidates = [path_text]
        stripped = path_text.rstrip(_TRAILING)
        if stripped and stripped != path_text:
            candidates.append(stripped)
        for candidate in candidates:
            path = resolve_path(candidate, self.base)
            try:
                status = path.stat()
            except OSError:
                continue
            if path.is_dir():
                return None
            stamp = (status.st_mtime_ns, status.st_size)
            cached = self._read.get(path)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            outcome: Attachment | AttachmentError
            try:
                outcome = read_attachment(candidate, self.base)
            except AttachmentError as error:
                outcome = error
            self._read[path] = (stamp, outcome)
            return outcome
        return None


def without_mention(text: str, name: str) -> str:
    """`text` with `@name` made plain text (the `@` taken off), so that it no
    longer attaches the file."""
    pieces = []
    last = 0
    for mention in find_mentions(text):
        if display_name(mention.path.rstrip(_TRAILING)) == name or (
            display_name(mention.path) == name
        ):
            pieces.append(text[last : mention.start])
            pieces.append(text[mention.start + 1 : mention.end].replace('"', ""))
            last = mention.end
    pieces.append(text[last:])
    return "".join(pieces)
