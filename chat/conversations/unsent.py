"""The message being written when kvchat quit, kept until its conversation
is open again.

Quitting (Ctrl+Q, a closed terminal, SIGTERM) with text in the prompt box
writes it to a file of its own in the data folder's `unsent/` (a temporary
file renamed into place: a quit cut short leaves the last one whole). The
file's name says which saved conversation it was written in
(`unsent-<time>-in-<id>.txt`), or none (`unsent-<time>.txt`: a conversation
not saved yet). It comes back when that conversation is opened again (at a
start or with Ctrl+O), its file removed; one written outside a saved
conversation comes back at the next start, whatever opens. One file a quit:
two windows that quit each keep theirs. No Textual here.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chat import paths
from chat.safe_files import UnsafeFileError, read_text
from chat.whole_files import replace_whole

UNSENT_LIMIT = 64 * 1024 * 1024
"""A file above this is not read back (kvchat writes none that large: a draft
that long does not fit any model's window)."""

_NAME = re.compile(r"unsent-(?P<time>[0-9]+)(?:-in-(?P<conversation>[0-9]+))?\.txt")


@dataclass(frozen=True)
class KeptMessage:
    path: Path
    written_ns: int
    conversation_id: int | None
    """The saved conversation it was written in; None: one not saved yet."""


def keep_unsent(text: str, conversation_id: int | None, folder: Path | None = None) -> Path:
    """Write `text`, written in `conversation_id` (None: a conversation not
    saved yet), for when it opens again; its path. Raises `OSError`."""
    folder = folder or paths.unsent_dir()
    folder.mkdir(parents=True, exist_ok=True)
    kept_in = "" if conversation_id is None else f"-in-{conversation_id}"
    path = folder / f"unsent-{time.time_ns()}{kept_in}.txt"
    replace_whole(path, text)
    return path


def kept_messages(folder: Path | None = None) -> list[KeptMessage]:
    """The messages kept by `keep_unsent`, newest first ([] when the folder
    cannot be read). Files of other names are not kvchat's and are left alone."""
    folder = folder or paths.unsent_dir()
    try:
        names = [entry.name for entry in os.scandir(folder)]
    except OSError:
        return []
    kept = []
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None:
            continue
        conversation = match["conversation"]
        kept.append(
            KeptMessage(
                folder / name,
                int(match["time"]),
                None if conversation is None else int(conversation),
            )
        )
    return sorted(kept, key=lambda message: message.written_ns, reverse=True)


def take_unsent(
    belongs_here: Callable[[int | None], bool], folder: Path | None = None
) -> str | None:
    """The newest kept message whose conversation `belongs_here` accepts,
    its file removed; None when there is none. A file that cannot be read is
    left where it is (the user may still open it) and the next one is tried."""
    for message in kept_messages(folder):
        if not belongs_here(message.conversation_id):
            continue
        try:
            text = read_text(message.path, UNSENT_LIMIT, what="unsent message")
            message.path.unlink()
        except (UnsafeFileError, OSError):
            continue
        return text
    return None


def take_at_start(
    opened: int | None, titles: Callable[[set[int]], dict[int, str]] | None
) -> tuple[str | None, list[str]]:
    """At a start that opened conversation `opened` (None: a new one): the
    message that comes back now, and the titles of the conversations whose
    messages wait for them to open.

    `titles` gives those of the conversations asked for that are saved (None:
    no database). A message whose conversation is no longer saved (deleted,
    or the database gone) could never come back where it was written: it
    comes back now, as one written outside a saved conversation does."""
    elsewhere = {
        message.conversation_id
        for message in kept_messages()
        if message.conversation_id is not None and message.conversation_id != opened
    }
    saved = titles(elsewhere) if titles is not None and elsewhere else {}
    # What is taken is never a saved conversation's: those all wait.
    text = take_unsent(lambda conversation: conversation not in saved)
    return text, [title for _, title in sorted(saved.items())]
