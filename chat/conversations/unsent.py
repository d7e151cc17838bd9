"""The message being written when kvchat quit, kept for the next start.

Quitting (Ctrl+Q, a closed terminal, SIGTERM) with text in the prompt box
writes it to a file of its own in the data folder's `unsent/` (a temporary
file renamed into place: a quit cut short leaves the last one whole); the
next start puts the newest back in the box and removes its file. One file a
quit: two windows that quit each keep theirs, and the next two starts get one
each. No Textual here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from chat import paths
from chat.safe_files import UnsafeFileError, read_text
from chat.whole_files import replace_whole

PREFIX, SUFFIX = "unsent-", ".txt"
UNSENT_LIMIT = 64 * 1024 * 1024
"""A file above this is not read back (kvchat writes none that large: a draft
that long does not fit any model's window)."""


def keep_unsent(text: str, folder: Path | None = None) -> Path:
    """Write `text` for the next start; its path. Raises `OSError`."""
    folder = folder or paths.unsent_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PREFIX}{time.time_ns()}{SUFFIX}"
    replace_whole(path, text)
    return path


def take_unsent(folder: Path | None = None) -> str | None:
    """The newest message kept by `keep_unsent`, its file removed; None when
    there is none. A file that cannot be read is left where it is (the user
    may still open it) and the next one is tried."""
    folder = folder or paths.unsent_dir()
    try:
        names = sorted(
            (entry.name for entry in os.scandir(folder) if _is_kept(entry.name)),
            key=lambda name: int(name[len(PREFIX) : -len(SUFFIX)]),
            reverse=True,
        )
    except OSError:
        return None
    for name in names:
        path = folder / name
        try:
            text = read_text(path, UNSENT_LIMIT, what="unsent message")
            path.unlink()
        except (UnsafeFileError, OSError):
            continue
        return text
    return None


def _is_kept(name: str) -> bool:
    return (
        name.startswith(PREFIX)
        and name.endswith(SUFFIX)
        and name[len(PREFIX) : -len(SUFFIX)].isdigit()
    )
