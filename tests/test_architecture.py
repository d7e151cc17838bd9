"""What the layer rules (import-linter contracts in pyproject.toml, checked by
`lint-imports` in .ci/run) cannot see: which modules a running program loads."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after_import(module: str, watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` a fresh interpreter has loaded after importing `module`."""
    code = (
        f"import json, sys, {module}; "
        f"print(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


def test_the_app_draws_its_first_frame_without_loading_llama_cpp() -> None:
    # llama.cpp is imported by the model loader's thread, after the first frame:
    # startup to the first frame is a measured target (chat.bench).
    assert loaded_after_import("chat.ui.app", ("llama_cpp", "chat.engine.llama")) == []


def test_the_app_draws_its_first_frame_without_numpy_or_jinja2() -> None:
    # Each is imported only where the engine uses it (a state file, a chat
    # template), after the model loads: numpy's import took 0.1 s here and
    # jinja2's 0.05 s, of about 0.5 s to the first frame (docs/performance.md).
    assert loaded_after_import("chat.ui.app", ("numpy", "jinja2")) == []


def test_one_shot_mode_and_the_conversation_commands_load_no_textual() -> None:
    # `chat -p` and `chat --list` answer in a pipe: no UI toolkit to import.
    for module in ("chat.cli.main", "chat.cli.oneshot", "chat.cli.conversations"):
        assert loaded_after_import(module, ("textual",)) == [], module
