"""The model table: every GGUF found, with what each is and what it costs at
a context size. `chat --list-models` prints it; the model picker shows it.

Reading each header takes tens of milliseconds: build it off the UI thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chat.errors import ModelError
from chat.models.catalog import ModelEntry, find_models
from chat.models.devices import DeviceReport, compute_devices
from chat.models.memory import (
    MemoryBudget,
    MemoryEstimate,
    available_ram,
    estimate_memory,
    key_cache_type,
    largest_fitting_context,
    memory_budget,
)
from chat.models.metadata import ModelMetadata, read_metadata
from chat.models.sizes import human_bytes
from chat.settings.schema import ModelSettings


@dataclass(frozen=True)
class ModelRow:
    entry: ModelEntry
    metadata: ModelMetadata | None
    memory: MemoryEstimate | None
    """At the context size asked for (0: the model's trained window)."""
    budget: MemoryBudget
    """What the estimate is compared with: free RAM, or the GPU's free
    memory when every layer is offloaded."""
    largest_context: int | None
    """The largest context that fits the budget, when the one asked for does not."""
    problem: str | None
    """Why the model cannot be used (a damaged file, a missing part)."""

    @property
    def fits(self) -> bool | None:
        if self.memory is None or self.budget.available is None:
            return None
        return self.memory.fits(self.budget.available)

    def memory_text(self) -> str:
        """`212 MiB at 8,192 ctx`, with `too big: ...` when it does not fit;
        `... on CUDA0` when every layer goes to the GPU."""
        if self.memory is None:
            return "?"
        text = f"{human_bytes(self.memory.total)} at {self.memory.n_ctx:,} ctx"
        budget = self.budget
        if budget.on_gpu:
            text += f" on {_names(budget.devices)}"
        elif budget.gpu_layers:
            text += f", {budget.gpu_layers}/{budget.n_layers} layers on GPU"
        if self.fits is False:
            if self.largest_context:
                return f"{text}: too big, fits up to {self.largest_context:,} ctx"
            return f"{text}: too big for the free {'GPU memory' if budget.on_gpu else 'memory'}"
        return text


def model_rows(
    n_ctx: int = 0,
    type_k: str = "auto",
    type_v: str = "f16",
    flash_attn: bool = False,
    entries: Sequence[ModelEntry] | None = None,
    n_gpu_layers: int = 0,
    devices: DeviceReport | None = None,
) -> list[ModelRow]:
    """A row per model found (or per `entries`), memory estimated at `n_ctx`
    with `n_gpu_layers` offloaded (-1: all), against the free RAM or, for
    models whose every layer is offloaded, the GPU's free memory. `devices`:
    what the llama.cpp build reports, asked here when layers are offloaded
    and it is not given. `type_k` "auto" resolves as the engine resolves it."""
    if devices is None and n_gpu_layers != 0:
        devices = compute_devices()
    type_k = key_cache_type(type_k, n_gpu_layers, devices)
    ram = available_ram()
    unread = memory_budget(ram, n_gpu_layers, 0, devices)  # no estimate to compare
    rows = []
    for entry in find_models() if entries is None else entries:
        if entry.problem:
            rows.append(ModelRow(entry, None, None, unread, None, entry.problem))
            continue
        # A file that cannot be read or estimated is a row that says why:
        # one damaged file (or one with no attention sizes) in a folder
        # took the whole list with it.
        try:
            meta = read_metadata(entry.path)
            budget = memory_budget(ram, n_gpu_layers, meta.block_count, devices)
            # On a GPU: what the GPU holds (the input embedding stays in RAM).
            on_gpu = budget.on_gpu
            memory = estimate_memory(meta, n_ctx, type_k, type_v, flash_attn, on_gpu=on_gpu)
            largest = None
            if budget.available is not None and not memory.fits(budget.available):
                largest = (
                    largest_fitting_context(
                        meta, budget.available, type_k, type_v, flash_attn, on_gpu=on_gpu
                    )
                    or None
                )
        except ModelError as error:
            rows.append(ModelRow(entry, None, None, unread, None, str(error)))
            continue
        rows.append(ModelRow(entry, meta, memory, budget, largest, None))
    return rows


def settings_rows(settings: ModelSettings) -> list[ModelRow]:
    """`model_rows` as these model settings would load each model (values f16:
    quantized values need flash attention, which kvchat leaves off on the CPU)."""
    return model_rows(
        settings.n_ctx,
        settings.cache_type_k,
        "f16",
        settings.flash_attn,
        n_gpu_layers=settings.n_gpu_layers,
    )


def budget_text(budget: MemoryBudget) -> str:
    """The memory a row was compared with, in words: `21.0 GiB of RAM`,
    `20.1 GiB of GPU memory on CUDA0`."""
    free = "unknown" if budget.available is None else human_bytes(budget.available)
    if budget.on_gpu:
        return f"{free} of GPU memory on {_names(budget.devices)}"
    if budget.gpu_layers:
        return (
            f"{free} of RAM ({budget.gpu_layers} of {budget.n_layers} layers on "
            f"{_names(budget.devices)} not counted: compared as if all stayed on the CPU)"
        )
    if budget.cpu_only and budget.missing_gpu:
        return f"{free} of RAM ({budget.missing_gpu}: the model runs on the CPU)"
    if budget.cpu_only:
        return f"{free} of RAM (this llama.cpp build runs on the CPU only)"
    return f"{free} of RAM"


def budgets_text(rows: Sequence[ModelRow]) -> str | None:
    """What the rows were compared with, each kind once (models that fit a
    GPU whole and models that do not differ); None when nothing is known."""
    texts: list[str] = []
    for row in rows:
        if row.metadata is None or row.budget.available is None:
            continue
        text = budget_text(row.budget)
        if text not in texts:
            texts.append(text)
    return "; ".join(texts) or None


def _names(devices: Sequence[str]) -> str:
    return " + ".join(devices) or "the GPU"


def row_dict(row: ModelRow) -> dict[str, object]:
    """A row as JSON (`chat --list-models --json`)."""
    meta = row.metadata
    return {
        "name": row.entry.name,
        "path": str(row.entry.path),
        "source": row.entry.source,
        "size": row.entry.size,
        "parameters": meta.n_params if meta else None,
        "quantization": meta.quantization if meta else None,
        "context_length": meta.context_length if meta else None,
        "chat_template": meta.chat_format if meta else None,
        "memory": (
            {
                "n_ctx": row.memory.n_ctx,
                "weights": row.memory.weights,
                "kv_cache": row.memory.kv_cache,
                "compute": row.memory.compute,
                "total": row.memory.total,
                "available": row.budget.available,
                "compared_with": row.budget.memory,
                "devices": list(row.budget.devices),
                "fits": row.fits,
                "largest_context": row.largest_context,
            }
            if row.memory
            else None
        ),
        "problem": row.problem,
    }


def same_model(row: ModelRow, path: Path) -> bool:
    try:
        return row.entry.path.resolve() == path.resolve()
    except OSError:
        return False


def model_choices(loaded: Path | None, setting: str | None) -> list[tuple[str, str]]:
    """The model file options of the settings pane, as (label, value): find one
    automatically, the current setting, then every GGUF found (as the model
    picker lists them), the loaded one marked. Walks download caches: call it
    off the UI thread."""
    options: list[tuple[str, str]] = [("Find one automatically", "")]
    seen: list[Path] = []

    def same(path: Path, other: Path) -> bool:
        try:
            return path.resolve() == other.resolve()
        except OSError:
            return path == other

    def is_loaded(path: Path) -> bool:
        return loaded is not None and same(path, loaded)

    if setting:
        mark = " (loaded)" if is_loaded(Path(setting)) else " (current setting)"
        options.append((setting + mark, setting))
        seen.append(Path(setting))
    for entry in find_models():
        if entry.problem or any(same(entry.path, other) for other in seen):
            continue
        seen.append(entry.path)
        mark = " · loaded" if is_loaded(entry.path) else ""
        label = f"{entry.name}  ({human_bytes(entry.size)}, {entry.source}){mark}"
        options.append((label, str(entry.path)))
    if loaded is not None and not any(same(loaded, other) for other in seen):
        options.append((f"{loaded} (loaded)", str(loaded)))
    return options
