"""The file picker ("Attach a file…" in the palette): type a path (→ accepts
the suggestion) or choose a file in the tree of the working folder. Returns the
path as typed or relative to the working folder; the chat screen reads it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.suggester import Suggester
from textual.widgets import DirectoryTree, Input, Static

from chat import paths
from chat.session.draft_attachments import complete_path, relative_name
from chat.ui.screens.base import Dialog


class PathSuggester(Suggester):
    """Suggests the first path that what is typed completes to."""

    def __init__(self, base: Path | None) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.base = base

    async def get_suggestion(self, value: str) -> str | None:
        matches = complete_path(value, self.base) if value else []
        return matches[0] if matches else None


class VisibleFiles(DirectoryTree):
    """The tree without hidden files and folders (dot names)."""

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [path for path in paths if not path.name.startswith(".")]


class AttachFileScreen(Dialog[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    AttachFileScreen {
        align: center middle;
    }
    #attach-dialog {
        width: 80%;
        max-width: 100;
        height: 80%;
        padding: 1 2;
        border: thick $primary;
        background: $surface;
    }
    #attach-help {
        color: $text-muted;
        margin-bottom: 1;
    }
    #attach-tree {
        height: 1fr;
        margin-top: 1;
    }
    """

    def __init__(self, base: Path | None = None) -> None:
        super().__init__()
        self.base = base or paths.working_folder()

    def compose(self) -> ComposeResult:
        with Vertical(id="attach-dialog"):
            yield Static(
                "Attach a text file to your message. Type its path (→ accepts the "
                "suggestion, Enter attaches), or choose it below. Esc cancels.",
                id="attach-help",
                markup=False,
            )
            yield Input(
                placeholder="path, e.g. notes.txt or ~/docs/plan.md",
                suggester=PathSuggester(self.base),
                id="attach-path",
            )
            yield VisibleFiles(self.base, id="attach-tree")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())

    @on(DirectoryTree.FileSelected)
    def _chosen(self, event: DirectoryTree.FileSelected) -> None:
        event.stop()
        self.dismiss(relative_name(Path(event.path), self.base))

    def action_cancel(self) -> None:
        self.dismiss(None)
