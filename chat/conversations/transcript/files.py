"""Writing a conversation to a file (Ctrl+E in the app).

The file goes to the current directory, where the user will look for it, or
to the data folder's `exports/` when that directory cannot be written. It is
written atomically (a temporary file, then a hard link to the final name) and
never replaces an existing file: a numeric suffix is added instead. No Textual.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from chat import paths
from chat.conversations.conversation import Conversation
from chat.conversations.transcript.json_export import to_json
from chat.conversations.transcript.markdown import to_markdown
from chat.errors import KvchatError
from chat.whole_files import write_new

ExportFormat = Literal["md", "json"]


def export_text(
    conv: Conversation,
    sampling: Mapping[str, Any],
    fmt: ExportFormat,
    *,
    all_branches: bool = False,
) -> str:
    """JSON: the whole tree. Markdown: the branch shown, or every branch."""
    if fmt == "json":
        return to_json(conv, sampling)
    return to_markdown(conv, sampling, all_branches=all_branches)


def file_stem(conv: Conversation) -> str:
    """`how-do-i-bake-bread-12`: the title in lower case, words (letters and
    digits of every script: "café", "東京") joined by dashes, then the
    conversation's id so that two chats with one title do not collide."""
    title = unicodedata.normalize("NFC", conv.title or conv.default_title())
    slug = re.sub(r"[\W_]+", "-", title.lower()).strip("-")[:50].rstrip("-")
    slug = slug or "conversation"
    try:
        os.fsencode(slug)
    except UnicodeEncodeError:
        # The file system's encoding (a non-UTF-8 locale, LC_ALL=C) cannot hold
        # these letters: their ASCII base letters ("café" -> "cafe") instead.
        ascii_slug = unicodedata.normalize("NFKD", slug).encode("ascii", "ignore").decode()
        slug = re.sub(r"[^a-z0-9]+", "-", ascii_slug).strip("-") or "conversation"
    return f"{slug}-{conv.id}" if conv.id is not None else slug


def default_folder() -> Path:
    cwd = paths.working_folder()
    return cwd if os.access(cwd, os.W_OK) else paths.data_dir() / "exports"


def write_new_file(folder: Path, stem: str, suffix: str, text: str) -> Path:
    """Write `text` to `folder/stem.suffix`, or `stem-2.suffix`, ... whichever is free."""
    names = (
        f"{stem}.{suffix}" if number == 1 else f"{stem}-{number}.{suffix}"
        for number in itertools.count(1)
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return write_new(folder, names, text)
    except OSError as error:
        raise KvchatError(
            f"kvchat cannot write the export: {paths.folder_problem(folder, error)}."
        ) from error


def export_conversation(
    conv: Conversation,
    sampling: Mapping[str, Any],
    fmt: ExportFormat = "md",
    folder: Path | None = None,
) -> Path:
    """Write the conversation to a new file and return its path."""
    target = folder if folder is not None else default_folder()
    return write_new_file(target, file_stem(conv), fmt, export_text(conv, sampling, fmt))


UNSAVED_PREFIX = "kvchat-unsaved-"


def rescue_folders() -> list[Path]:
    """Where `export_elsewhere` tries, in order: the home folder (where the user
    looks first), then the temporary folder (often another disk, or memory)."""
    return [Path.home(), Path(tempfile.gettempdir())]


def export_elsewhere(
    conv: Conversation, sampling: Mapping[str, Any], folders: list[Path] | None = None
) -> Path:
    """Write the whole conversation as JSON (what `chat --import` reads) to the
    first of `folders` (default: `rescue_folders()`) that takes it; for turns the
    database could not save. Raises KvchatError naming why each folder failed."""
    problems = []
    text = export_text(conv, sampling, "json")
    for folder in folders if folders is not None else rescue_folders():
        try:
            return write_new_file(folder, UNSAVED_PREFIX + file_stem(conv), "json", text)
        except KvchatError as error:
            problems.append(str(error).removeprefix("kvchat cannot write the export: ").rstrip("."))
    raise KvchatError(f"kvchat cannot write the conversation to a file: {'; '.join(problems)}.")
