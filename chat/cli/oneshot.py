"""One-shot mode: `chat -p "prompt"` streams one reply to stdout and exits.

Like `ollama run model "prompt"` or `llm "prompt"`: plain text, safe for a
terminal or a pipe; `--json` prints the reply and its statistics instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from chat import paths
from chat.conversations.conversation import ReplyStats
from chat.engine.base import Finished, TokenEvent
from chat.model_files import ModelCandidate
from chat.settings.schema import Settings


def stats_dict(stats: ReplyStats) -> dict[str, object]:
    data = dataclasses.asdict(stats)
    data["prompt_reused"] = stats.prompt_reused
    return data


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[list[int]]:
    """Hold Ctrl+C while llama.cpp loads the model, to act on it when the load
    returns. Meanwhile the only Python code that runs is llama.cpp's log
    callback: a KeyboardInterrupt raised there cannot leave it (ctypes drops
    it) and the load would go on to a reply nobody wants."""
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def run_oneshot(
    prompt: str,
    settings: Settings,
    model: ModelCandidate,
    *,
    as_json: bool,
    out: TextIO,
) -> int:
    """Stream the reply to `out`. Raises `KvchatError` for problems the user can fix."""
    from chat.engine.llama import load_engine
    from chat.engine.llama_log import log_problem

    # llama-cpp-python prints model metadata to sys.stderr while loading; that
    # is noise here (llama.cpp's own log already goes to the log file).
    with _ctrl_c_held() as pressed, contextlib.redirect_stderr(io.StringIO()):
        engine = load_engine(model.path, settings.model, paths.log_file())
    if pressed:
        engine.close()
        raise KeyboardInterrupt
    # The reply does not need the log: a log that cannot be written is a warning.
    problem = log_problem()
    if problem is not None:
        print(f"chat: warning: {problem}", file=sys.stderr)
    messages = []
    if settings.chat.system_prompt:
        messages.append({"role": "system", "content": settings.chat.system_prompt})
    messages.append({"role": "user", "content": prompt})
    cancel = threading.Event()
    finished: Finished | None = None
    try:
        for event in engine.stream_reply(messages, settings.sampling, cancel):
            if isinstance(event, TokenEvent):
                if not as_json:
                    out.write(event.text)
                    out.flush()
            else:
                finished = event
    finally:
        engine.close()
    assert finished is not None
    if as_json:
        json.dump(
            {
                "model": engine.info.name,
                "model_path": str(model.path),
                "reply": finished.text,
                "stats": stats_dict(finished.stats),
            },
            out,
            ensure_ascii=False,
        )
        out.write("\n")
    elif not finished.text.endswith("\n"):
        out.write("\n")
    out.flush()
    return 0
