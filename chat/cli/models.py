"""`chat --list-models` (a table, or JSON with `--json`) and `chat --pull SPEC`."""

from __future__ import annotations

import json
import sys
import threading
from typing import TextIO

from chat.cli.terminal_output import write_control
from chat.models.table import ModelRow, budgets_text, human_bytes, row_dict, settings_rows
from chat.sanitize import sanitize_line
from chat.settings.schema import ModelSettings

HEADER = ("model", "params", "quant", "size", "trained ctx", "template", "memory", "found in")


def print_models(settings: ModelSettings, *, as_json: bool, out: TextIO) -> int:
    """Every GGUF found, with the memory each needs at the context size set
    (the model's own window when it is 0) against the free memory: RAM, or
    the GPU's when every layer is offloaded."""
    rows = settings_rows(settings)
    if as_json:
        json.dump([row_dict(row) for row in rows], out, indent=2)
        out.write("\n")
        return 0
    if not rows:
        from chat.models.files import how_to_get_a_model

        print(how_to_get_a_model(), file=out)
        return 0
    table = [HEADER, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER) - 1)]
    for line, row in zip(table, [None, *rows], strict=True):
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        print("  ".join([*cells, line[-1]]).rstrip(), file=out)
        if row is not None:
            print(f"    {sanitize_line(str(row.entry.path))}", file=out)
            if row.problem:
                print(f"    cannot be used: {sanitize_line(row.problem)}", file=out)
    compared = budgets_text(rows)
    if compared is not None:
        print(f"\nFree memory now: {compared}.", file=out)
    return 0


def _cells(row: ModelRow) -> tuple[str, ...]:
    # Names come from file names and stores' manifests: shown without controls.
    name, source = sanitize_line(row.entry.name), sanitize_line(row.entry.source)
    meta = row.metadata
    if meta is None:
        size = human_bytes(row.entry.size)
        return (name, "", "", size, "", "", "cannot be used", source)
    return (
        name,
        meta.parameters_text,
        meta.quantization,
        human_bytes(row.entry.size),
        f"{meta.context_length:,}" if meta.context_length else "?",
        meta.chat_format or "?",
        row.memory_text(),
        source,
    )


def pull_model(spec: str, err: TextIO | None = None) -> int:
    """Download `spec` (org/repo[:QUANT] or a .gguf URL), with progress on
    stderr; Ctrl+C cancels. Prints the path to load on stdout."""
    from chat.models.download import DownloadCancelled, DownloadProgress, pull

    err = err or sys.stderr
    cancel = threading.Event()
    terminal = err.isatty()

    def progress(report: DownloadProgress) -> None:
        if not terminal:
            return
        share = 100 * report.done / report.total if report.total else 0.0
        left = f", {report.seconds_left:,.0f} s left" if report.seconds_left is not None else ""
        what = "checking" if report.verifying else f"{human_bytes(int(report.speed))}/s{left}"
        part = f" (part {report.part}/{report.parts})" if report.parts > 1 else ""
        write_control(err, "\r")
        err.write(
            f"{sanitize_line(report.file)}{part}: {human_bytes(report.done)} of "
            f"{human_bytes(report.total)} ({share:.0f}%), {what}"
        )
        write_control(err, "\x1b[K")
        err.flush()

    try:
        path = pull(spec, progress, cancel)
    except KeyboardInterrupt:
        cancel.set()
        if terminal:
            err.write("\n")
        print("chat: download cancelled; nothing was kept where kvchat loads models.", file=err)
        return 130
    except DownloadCancelled:
        print("chat: download cancelled.", file=err)
        return 130
    if terminal:
        err.write("\n")
    print(path)
    return 0
