"""Reading llama.cpp's own llama-bench (chat.bench.llama_bench): the command
it is run with and its JSON, with a stand-in that answers as llama-bench's
`-o json` does (the real one runs in the benchmark itself)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from chat.bench.llama_bench import native_rates

ANSWER = [
    {"n_prompt": 512, "n_gen": 0, "n_threads": 1, "avg_ts": 700.5},
    {"n_prompt": 0, "n_gen": 128, "n_threads": 1, "avg_ts": 143.7},
    {"n_prompt": 512, "n_gen": 0, "n_threads": 2, "avg_ts": 1300.0},
    {"n_prompt": 0, "n_gen": 128, "n_threads": 2, "avg_ts": 160.25},
]


def stand_in(folder: Path) -> tuple[Path, Path]:
    """A llama-bench that records its arguments and prints ANSWER."""
    args = folder / "args.json"
    script = folder / "llama-bench"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(args)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print({json.dumps(json.dumps(ANSWER))})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, args


def test_rates_by_thread_count_from_llama_benchs_json(tmp_path: Path) -> None:
    binary, args = stand_in(tmp_path)
    rates = native_rates(binary, tmp_path / "model.gguf", [1, 2], prompt=512, generate=128)
    assert rates.prompt_tps == {1: 700.5, 2: 1300.0}
    assert rates.decode_tps == {1: 143.7, 2: 160.25}
    sent = json.loads(args.read_text())
    # Every thread count in one run, JSON out, and the key type kvchat uses on a CPU.
    assert sent[sent.index("-t") + 1] == "1,2"
    assert sent[sent.index("-o") + 1] == "json"
    assert sent[sent.index("-ctk") + 1] == "q8_0"
    assert sent[sent.index("-m") + 1] == str(tmp_path / "model.gguf")
