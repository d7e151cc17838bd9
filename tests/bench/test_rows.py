"""The benchmark's report (chat.bench.rows): how a row's figure and verdict
read, the table's columns, and the JSON CI keeps."""

from __future__ import annotations

import io
import json
from pathlib import Path

from chat.bench.rows import Row, print_table, write_json


def test_a_rows_figure_reads_at_its_size() -> None:
    assert Row("decode", 81.34, "tok/s").cells()[1] == "81.3 tok/s"
    assert Row("decode", 0.004567, "s").cells()[1] == "0.00457 s"
    assert Row("prompt", 1234.6, "tok/s").cells()[1] == "1,235 tok/s"
    assert Row("count", 7, "").cells()[1] == "7"


def test_a_row_not_measured_shows_a_dash_and_a_verdict_only_with_a_target() -> None:
    assert Row("rpc", None, "tok/s").cells()[1] == "— tok/s"
    assert Row("free", 3.0, "s").cells()[3] == ""
    assert Row("met", 3.0, "s", "≤ 5 s", ok=True).cells()[3] == "ok"
    assert Row("missed", 9.0, "s", "≤ 5 s", ok=False).cells()[3] == "MISSED"


def test_the_table_lines_its_columns_up() -> None:
    out = io.StringIO()
    rows = [
        Row("startup to first frame", 0.31, "s", "≤ 0.5 s", ok=True, note="median of 5"),
        Row("decode", 120.0, "tok/s"),
    ]
    print_table(rows, out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("measure") and set(lines[1]) <= {"-", "+"}
    # Every value starts in the same column.
    starts = {
        line.index(cell) for line, cell in zip(lines[2:], ["0.31 s", "120 tok/s"], strict=True)
    }
    assert len(starts) == 1
    assert not any(line.endswith(" ") for line in lines)


def test_the_json_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    write_json([Row("decode", 12.5, "tok/s", "≥ 10", ok=True, note="n")], path)
    assert json.loads(path.read_text()) == [
        {
            "name": "decode",
            "value": 12.5,
            "unit": "tok/s",
            "target": "≥ 10",
            "ok": True,
            "note": "n",
        }
    ]
