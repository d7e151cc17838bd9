"""Copying text out of kvchat.

Text goes to the clipboard through the terminal: the OSC 52 escape sequence
(Textual's `copy_to_clipboard`), which also works over SSH, since the terminal
on the user's own machine takes it. A few terminals are known to ignore it;
there the text is saved to a file instead and the user is told where, rather
than told it was copied when it was not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chat import paths
from chat.sanitize import sanitize
from chat.whole_files import replace_whole

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from textual.app import App

    from chat.conversations.conversation import Message


@dataclass(frozen=True)
class CodeBlock:
    code: str
    language: str

    def describe(self) -> str:
        """`python, 3 lines`."""
        lines = self.code.count("\n") + (0 if self.code.endswith("\n") else 1)
        kind = self.language or "code"
        return f"{kind}, {lines:,} line{'s' if lines != 1 else ''}"


def code_blocks(markdown: str, parser: MarkdownIt) -> list[CodeBlock]:
    """The fenced and indented code blocks of a reply, in order, as the reply's
    Markdown widget shows them (`parser`: the one it renders with)."""
    # Without the newline that ends the block's last line, as the widget shows it.
    return [
        CodeBlock(
            token.content.removesuffix("\n"),
            token.info.strip().split(" ")[0] if token.info else "",
        )
        for token in parser.parse(markdown)
        if token.type in ("fence", "code_block")
    ]


def terminal_without_clipboard(environ: Mapping[str, str]) -> str | None:
    """The name of the terminal when it is one known to ignore OSC 52; else None
    (most terminals take it: kitty, WezTerm, iTerm2, Alacritty, foot, Windows
    Terminal, xterm with its option set, tmux with `set-clipboard on`)."""
    if environ.get("TERM_PROGRAM") == "Apple_Terminal":
        return "macOS Terminal"
    if environ.get("TERM") == "linux":
        return "The Linux console"
    if "VTE_VERSION" in environ and "TMUX" not in environ and "SSH_TTY" not in environ:
        return "This terminal (GNOME Terminal or another VTE one)"
    return None


def fallback_file() -> Path:
    return paths.state_dir() / "copied.txt"


def save_for_copying(text: str) -> Path:
    """Write `text` where the user can copy it from; raises OSError."""
    path = fallback_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, text, durable=False)  # for this session's copying only
    return path


def copy_text(
    app: App[object], text: str, what: str, environ: Mapping[str, str] = os.environ
) -> None:
    """Copy `text` (`what` it is, for the message: "the reply", "code block 2")
    and tell the user what happened. What is copied is what the screen shows:
    escape sequences, control characters (a carriage return would run a line
    pasted into a shell) and bidirectional overrides are left out."""
    text = sanitize(text)
    terminal = terminal_without_clipboard(environ)
    if terminal is None:
        app.copy_to_clipboard(text)
        app.notify(
            f"Copied {what} ({len(text):,} characters) to the clipboard.",
            markup=False,
            timeout=3,
        )
        return
    try:
        path = save_for_copying(text)
    except OSError as error:
        app.notify(
            f"{terminal} cannot take copied text from programs, and {what} could not be "
            f"saved to a file either: {paths.folder_problem(fallback_file().parent, error)}",
            severity="error",
            markup=False,
            timeout=10,
        )
        return
    app.notify(
        f"{terminal} cannot take copied text from programs: {what} was saved to {path} "
        "instead, to copy from there.",
        severity="warning",
        markup=False,
        timeout=10,
    )


def copy_message(app: App[object], message: Message | None) -> None:
    """Copy a message of the conversation (F5: the selected one, else the last reply)."""
    if message is None:
        app.notify("There is no reply to copy yet.", severity="warning")
        return
    what = "the reply" if message.role == "assistant" else "your message"
    copy_text(app, message.content, what)


def copy_code_block(app: App[object], blocks: list[CodeBlock], index: int) -> None:
    """Copy code block `index` of `blocks` (the palette lists them, one entry each)."""
    if not 0 <= index < len(blocks):
        app.notify("That code block is no longer there.", severity="warning")
        return
    copy_text(app, blocks[index].code, f"code block {index + 1}")
