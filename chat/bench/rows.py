"""What a run reports: one `Row` per measure, its target and verdict, printed
as a table and written as JSON; and the `Options` every measure is sized by."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO


@dataclass
class Row:
    name: str
    value: float | None
    """None: not measured (the run then fails)."""
    unit: str
    target: str = ""
    ok: bool | None = None
    """Whether the target was met; None for a row without a target."""
    note: str = ""

    def cells(self) -> list[str]:
        value = (
            "—"
            if self.value is None
            else f"{self.value:,.3g}"
            if self.value < 100
            else f"{self.value:,.0f}"
        )
        verdict = "" if self.ok is None else ("ok" if self.ok else "MISSED")
        return [self.name, f"{value} {self.unit}".strip(), self.target, verdict, self.note]


@dataclass
class Options:
    model: Path
    turns: int
    tokens: int
    quick: bool
    messages: int
    conversations: int


def print_table(rows: list[Row], out: TextIO = sys.stdout) -> None:
    header = ["measure", "value", "target", "", "note"]
    table = [header] + [row.cells() for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print(
            " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )
        if i == 0:
            print("-+-".join("-" * w for w in widths), file=out)


def write_json(rows: list[Row], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in rows], indent=2))
