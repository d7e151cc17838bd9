"""`chat --list-presets`: every preset, built-in and the user's, and where the
user's go; bad preset files are named on stderr."""

from __future__ import annotations

import sys
from typing import TextIO

from chat import paths
from chat.sanitize import sanitize_line
from chat.settings.presets import load_presets


def print_presets(out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    presets, problems = load_presets()
    for problem in problems:
        # A problem reads "<file>: field 'x': what is wrong."
        print(f"chat: warning: skipped preset file {problem}", file=err)
    # Names and descriptions come from the user's files: cleaned even on a pipe.
    names = [sanitize_line(preset.name) for preset in presets]
    width = max(len(name) for name in names)
    for name, preset in zip(names, presets, strict=True):
        notes = [note for note in (preset.description, preset.summary()) if note]
        if not preset.builtin:
            notes.append(f"(your preset: {preset.path})")
        print(f"{name:<{width}}  {sanitize_line(' · '.join(notes))}".rstrip(), file=out)
    print(file=out)
    print("Use one for a conversation with Ctrl+P > Use preset, or F9, in the app.", file=out)
    print(f"Your own presets: one .toml file each in {paths.user_presets_dir()}", file=out)
    print("(docs/presets.md has an example file to start from).", file=out)
    return 0
