"""The model picker (F8, "Switch model" in the palette): every GGUF kvchat can
find (its models folder, the Hugging Face cache, llama.cpp's cache, LM Studio,
Ollama), what each is and what it needs in memory at the context size set,
filtered as you type. Enter switches to the model (the conversation stays);
Ctrl+D downloads one from Hugging Face, with progress, and Esc cancels it.

The screen dismisses with the path of the model to load, or None.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Label, ProgressBar, Static

from chat.models.download import DownloadProgress
from chat.models.table import ModelRow, budgets_text, human_bytes
from chat.runtime.background import in_thread
from chat.sanitize import sanitize
from chat.settings.schema import ModelSettings
from chat.ui.screens.base import ListScreen
from chat.ui.untrusted import shown


@dataclass
class DownloadMoved(Message):
    """A download's progress report, from its thread."""

    report: DownloadProgress


COLUMNS = ("Model", "Params", "Quant", "Size", "Trained ctx", "Template", "Memory", "Found in")
FILTER_HINT = "Filter by name, quantization or where it was found"
PULL_HINT = "Hugging Face repo (org/repo or org/repo:Q4_K_M) or a .gguf URL; Enter downloads"


class ModelPickerScreen(ListScreen[Path | None]):
    DEFAULT_CSS = """
    #models-progress {
        margin: 0 1;
    }
    """

    BINDINGS = [
        Binding("escape", "close", "Back"),
        # priority: the filter box would take Ctrl+D (delete right).
        Binding("ctrl+d", "download", "Download", priority=True),
        Binding("down", "focus_table", "List", show=False),
    ]

    def __init__(self, settings: ModelSettings, loaded: Path | None) -> None:
        super().__init__()
        self._settings = settings
        self._loaded = loaded
        self._rows: list[ModelRow] = []
        self._cancel_download: threading.Event | None = None

    def compose(self) -> ComposeResult:
        yield Label("Models", id="models-title", classes="list-title")
        yield Input(
            placeholder="Filter by name, quantization or where it was found",
            id="models-filter",
            classes="list-filter",
        )
        yield Input(
            placeholder=PULL_HINT,
            id="models-pull",
            classes="list-filter",
        )
        yield DataTable(
            id="models-table", classes="list-table", cursor_type="row", zebra_stripes=True
        )
        yield ProgressBar(id="models-progress", show_eta=False)
        yield Static("Looking for models…", id="models-status", classes="list-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        # What decides the choice first: an 80-column terminal shows the name,
        # the memory it needs and the file's size.
        for label in (
            "Model",
            "Memory",
            "Size",
            "Params",
            "Quant",
            "Trained ctx",
            "Template",
            "Found in",
        ):
            table.add_column(label)
        self.query_one("#models-pull").display = False
        self.query_one(ProgressBar).display = False
        self.query_one("#models-filter", Input).focus()
        self._load()

    @work(exclusive=True, group="list-models")
    async def _load(self) -> None:
        from chat.models.table import settings_rows

        # Walks download caches, reads each header and asks llama.cpp for its
        # devices: not on the UI thread.
        rows = await in_thread("list-models", settings_rows, self._settings)
        if self not in self.app.screen_stack:
            return  # closed while it listed (Esc right after F8): nothing to show
        self._rows = rows
        self._show()

    def _show(self) -> None:
        query = self.query_one("#models-filter", Input).value.strip().lower()
        table = self.query_one(DataTable)
        table.clear()
        shown = 0
        for index, row in enumerate(self._rows):
            if query and query not in _searchable(row):
                continue
            table.add_row(*_cells(row, self._loaded), key=str(index))
            shown += 1
        status = self.query_one("#models-status", Static)
        if not self._rows:
            status.update(
                "No GGUF model found. Ctrl+D downloads one from Hugging Face "
                "(e.g. bartowski/Qwen2.5-0.5B-Instruct-GGUF)."
            )
            return
        compared = budgets_text(self._rows)
        free = f" · free {compared}" if compared is not None else ""
        context = (
            f"at a {self._settings.n_ctx:,}-token window"
            if self._settings.n_ctx
            else "at each model's own window"
        )
        matched = (
            f"{shown} of {len(self._rows)} models"
            if shown
            else f"No model matches the filter (of {len(self._rows)})"
        )
        status.update(
            f"{matched} · memory {context}{free} · "
            "Enter switches to the model (the conversation stays)"
        )

    @on(Input.Changed, "#models-filter")
    def _filter(self) -> None:
        self._show()

    @on(Input.Submitted, "#models-filter")
    def _pick_first(self) -> None:
        table = self.query_one(DataTable)
        if table.row_count:
            table.move_cursor(row=0)
            self._pick(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._pick(event.row_key.value)

    def _pick(self, key: str | None) -> None:
        if key is None:
            return
        row = self._rows[int(key)]
        if row.problem:
            self.notify(row.problem, severity="error", timeout=10, markup=False)
            return
        if row.fits is False:
            self.notify(
                f"{row.entry.name} needs {row.memory_text()}; loading it may fail"
                f"{'' if row.budget.on_gpu else ' or swap'}.",
                severity="warning",
                timeout=10,
                markup=False,
            )
        self.dismiss(row.entry.path)

    def action_close(self) -> None:
        if self._cancel_download is not None:
            self._cancel_download.set()
            return
        pull = self.query_one("#models-pull", Input)
        if pull.display:
            pull.display = False
            self.query_one("#models-filter").focus()
            return
        self.dismiss(None)

    def action_focus_table(self) -> None:
        self.query_one(DataTable).focus()

    # Downloading.

    def action_download(self) -> None:
        pull = self.query_one("#models-pull", Input)
        pull.display = True
        pull.focus()

    @on(Input.Submitted, "#models-pull")
    def _start_download(self, event: Input.Submitted) -> None:
        spec = event.value.strip()
        if not spec or self._cancel_download is not None:
            return
        self._download(spec)

    @work(exclusive=True, group="download")
    async def _download(self, spec: str) -> None:
        from chat.models.download import DownloadCancelled, pull

        cancel = threading.Event()
        self._cancel_download = cancel
        bar = self.query_one(ProgressBar)
        status = self.query_one("#models-status", Static)
        bar.display = True
        bar.update(total=None, progress=0)
        status.update(shown(f"Downloading {spec}… Esc cancels."))

        def progress(report: DownloadProgress) -> None:
            # From the download's thread: post_message never blocks it.
            self.post_message(DownloadMoved(report))

        try:
            path = await in_thread("pull", pull, spec, progress, cancel)
        except DownloadCancelled:
            status.update("Download cancelled; nothing was kept where kvchat loads models.")
            return
        except Exception as error:  # DownloadError: one sentence; anything else too
            status.update(sanitize(str(error)))
            return
        finally:
            self._cancel_download = None
            bar.display = False
        self.notify(f"Downloaded {path.name}.", markup=False)
        self.dismiss(path)

    def on_download_moved(self, message: DownloadMoved) -> None:
        report = message.report
        bar = self.query_one(ProgressBar)
        bar.update(total=report.total or None, progress=report.done)
        left = f", {report.seconds_left:,.0f} s left" if report.seconds_left is not None else ""
        doing = "checking" if report.verifying else f"{human_bytes(int(report.speed))}/s{left}"
        part = f" (part {report.part} of {report.parts})" if report.parts > 1 else ""
        self.query_one("#models-status", Static).update(
            f"{sanitize(report.file)}{part}: {human_bytes(report.done)} of "
            f"{human_bytes(report.total)}, {doing} · Esc cancels"
        )


def _searchable(row: ModelRow) -> str:
    meta = row.metadata
    parts = [row.entry.name, row.entry.source, str(row.entry.path)]
    if meta is not None:
        parts += [meta.quantization, meta.chat_format or "", meta.architecture or ""]
    return " ".join(parts).lower()


def _cells(row: ModelRow, loaded: Path | None) -> tuple[Text, ...]:
    # rich Text: never markup (an Ollama or file name may be anything).
    from chat.models.table import same_model

    mark = "● " if loaded is not None and same_model(row, loaded) else ""
    name = Text(mark + sanitize(row.entry.name))
    size = Text(human_bytes(row.entry.size), justify="right")
    source = Text(sanitize(row.entry.source))
    meta = row.metadata
    if meta is None:
        problem = Text(sanitize(row.problem or "unreadable"), style="red")
        return (name, problem, size, Text(""), Text(""), Text(""), Text(""), source)
    memory = Text(row.memory_text(), style="red" if row.fits is False else "")
    trained = f"{meta.context_length:,}" if meta.context_length else "?"
    return (
        name,
        memory,
        size,
        Text(meta.parameters_text, justify="right"),
        Text(meta.quantization),
        Text(trained, justify="right"),
        Text(meta.chat_format or "?"),
        source,
    )
