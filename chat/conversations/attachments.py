"""Text files attached to a message: reading one, and what the model is sent.

An attachment is the file's name and its text, taken when the message is
sent: the message keeps them (the store saves them with it), so the prompt is
the same whenever it is sent again, whatever happens to the file afterwards.
The model sees each attachment after the user's text, as a fenced block headed
by the file's name (`prompt_text`):

    summarise @notes.txt

    File: notes.txt
    ```
    ...the file's text...
    ```

Only UTF-8 text is attached (a NUL byte or bytes that do not decode mean a
binary file); anything else is refused with an `AttachmentError` that says
why, in words. No Textual here.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chat import paths
from chat.errors import KvchatError
from chat.safe_files import UnsafeFileError, read_bytes, refusal_detail
from chat.sanitize import sanitize

MAX_ATTACHMENT_BYTES = 1024 * 1024
"""Larger files are refused before being read: even a large context window
holds about this much text (a token is ~4 bytes of English)."""


class AttachmentError(KvchatError):
    """A file that cannot be attached: missing, a folder, unreadable, binary or too large."""


@dataclass(frozen=True)
class Attachment:
    """A file's text as it was attached."""

    name: str
    """The path as the user gave it (relative to the working folder, or with
    `~`), without control characters: it is shown, and sent to the model."""
    text: str
    """The file's text, line endings made `\\n`."""


def display_name(path_text: str) -> str:
    """`path_text` safe to show and to send: one line, no escape sequences."""
    return sanitize(path_text).replace("\n", " ").replace("\t", " ").strip()


def resolve_path(path_text: str, base: Path | None = None) -> Path:
    """`~` expanded; a relative path is taken from `base` (by default the
    folder kvchat was started in)."""
    path = Path(path_text).expanduser()
    return path if path.is_absolute() else (base or paths.working_folder()) / path


def read_attachment(path_text: str, base: Path | None = None) -> Attachment:
    """The file at `path_text` as an attachment; raises `AttachmentError`."""
    name = display_name(path_text) or "?"
    path = resolve_path(path_text, base)
    try:
        if path.is_dir():
            raise AttachmentError(f"{name} is a folder: only a file can be attached.")
        status = _status(path)
        if status and stat.S_ISREG(status.st_mode) and status.st_size > MAX_ATTACHMENT_BYTES:
            raise AttachmentError(
                f"{name} is too large to attach ({_size(status.st_size)}; the limit is "
                f"{_size(MAX_ATTACHMENT_BYTES)})."
            )
        # Regular files only, opened without blocking: `@/dev/stdin` would read
        # kvchat's own terminal, a FIFO would wait for a writer forever.
        data = read_bytes(path, MAX_ATTACHMENT_BYTES, what="file")
    except FileNotFoundError as error:
        raise AttachmentError(
            f"{name} does not exist (looked for {display_name(str(path))})."
        ) from error
    except PermissionError as error:
        raise AttachmentError(f"{name} cannot be read: permission denied.") from error
    except UnsafeFileError as error:
        if isinstance(error.__cause__, PermissionError):
            raise AttachmentError(f"{name} cannot be read: permission denied.") from error
        detail = refusal_detail(error, path, "file")
        raise AttachmentError(f"{name} cannot be attached: it {detail}") from error
    except OSError as error:
        reason = error.strerror or str(error)
        raise AttachmentError(f"{name} cannot be read: {reason}.") from error
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise AttachmentError(
            f"{name} is too large to attach (the limit is {_size(MAX_ATTACHMENT_BYTES)})."
        )
    if b"\0" in data:
        raise AttachmentError(f"{name} is not a text file (it holds binary data).")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise AttachmentError(
            f"{name} is not a text file kvchat can read (it is not UTF-8 text)."
        ) from error
    return Attachment(name, text.replace("\r\n", "\n"))


def _status(path: Path) -> os.stat_result | None:
    """The file's status; None when only opening it can say what is wrong (a
    link loop); FileNotFoundError as is."""
    try:
        return path.stat()
    except FileNotFoundError:
        raise
    except OSError:
        return None


def _size(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


def attachment_block(attachment: Attachment) -> str:
    """One attachment as the model sees it. The fence is longer than any run of
    backticks in the text, so a Markdown file's own code fences stay inside it."""
    longest = max((len(run) for run in re.findall(r"`+", attachment.text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = attachment.text if attachment.text.endswith("\n") else attachment.text + "\n"
    return f"File: {attachment.name}\n{fence}\n{body}{fence}"


def prompt_text(text: str, attachments: Sequence[Attachment]) -> str:
    """A user message as the model is sent it: its text, then each attachment."""
    if not attachments:
        return text
    blocks = "\n\n".join(attachment_block(attachment) for attachment in attachments)
    return f"{text}\n\n{blocks}" if text else blocks
