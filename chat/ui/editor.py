"""Composing a message in the user's own editor ($VISUAL, else $EDITOR).

The app is suspended while the editor runs (Textual's `App.suspend`); the text
goes through a temporary file, which is removed afterwards.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from chat.errors import KvchatError

# Tried in order when neither variable is set (Debian's `editor` alternative first).
FALLBACK_EDITORS = ("editor", "nano", "vi")


class EditorError(KvchatError):
    """No editor could be run, or it failed; the text is unchanged."""


def editor_command(environ: Mapping[str, str]) -> tuple[list[str], str]:
    """The editor's command line and where it came from ("$VISUAL", "$EDITOR",
    or the fallback's name). Raises EditorError when there is none."""
    for variable in ("VISUAL", "EDITOR"):
        value = environ.get(variable, "").strip()
        if value:
            try:
                command = shlex.split(value)
            except ValueError as error:
                raise EditorError(f"${variable} cannot be read as a command: {error}.") from None
            return command, f"${variable}"
    for name in FALLBACK_EDITORS:
        if shutil.which(name, path=environ.get("PATH")):
            return [name], name
    raise EditorError(
        "No editor is set: set $VISUAL or $EDITOR to the one you use "
        "(for example: export EDITOR=nano)."
    )


def edit_text(text: str, environ: Mapping[str, str] = os.environ) -> str:
    """Run the editor on `text` and return what was saved (one trailing newline,
    which most editors add, removed). Call it with the app suspended. Raises
    EditorError when the editor is missing or exits with an error."""
    command, source = editor_command(environ)
    folder = tempfile.mkdtemp(prefix="kvchat-")
    path = Path(folder) / "message.md"
    try:
        path.write_text(text, encoding="utf-8")
        try:
            status = subprocess.call([*command, str(path)])
        except FileNotFoundError:
            raise EditorError(
                f"The editor {command[0]!r} (from {source}) was not found; your text is unchanged."
            ) from None
        except OSError as error:
            raise EditorError(
                f"The editor {command[0]!r} (from {source}) could not be run: "
                f"{error.strerror or error}; your text is unchanged."
            ) from None
        if status != 0:
            raise EditorError(
                f"The editor {command[0]!r} exited with status {status}; your text is unchanged."
            )
        edited = path.read_text(encoding="utf-8", errors="replace")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return edited[:-1] if edited.endswith("\n") else edited
