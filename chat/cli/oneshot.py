"""One-shot mode: `chat -p "prompt"` streams one reply to stdout and exits.

Like `ollama run model "prompt"` or `llm "prompt"`: plain text, safe for a
terminal or a pipe; `--json` prints the reply and its statistics instead. The
reply comes from a model loaded here (`run_oneshot`) or from a model server
(`run_oneshot_on_server`, with `--server` or `[server] url`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, TextIO

from chat import paths
from chat.cli.terminal_output import write_control
from chat.conversations.conversation import ReplyStats
from chat.engine.base import Engine, Finished, PromptProgress, TokenEvent
from chat.errors import ChatTemplateError, KvchatError, ServerError
from chat.model_files import ModelCandidate
from chat.session.prompt_progress import SHOW_AFTER_S, progress_text
from chat.settings.schema import Settings
from chat.settings.server import public_url

if TYPE_CHECKING:  # the remote engine is imported only when a server is used
    from chat.engine.remote import ServerConfig


def stats_dict(stats: ReplyStats) -> dict[str, object]:
    data = dataclasses.asdict(stats)
    data["prompt_reused"] = stats.prompt_reused
    return data


class _ProgressLine:
    """Prompt progress on stderr when it is a terminal: one line, written over
    as batches are evaluated, and erased before the reply starts. It appears
    only once evaluation has taken `SHOW_AFTER_S` (a timer draws it then), so
    a short prompt prints nothing. Never anything on a pipe or a file."""

    _ERASE = "\r\x1b[2K"

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._on = stream.isatty()
        self._lock = threading.Lock()
        self._latest: PromptProgress | None = None
        self._timer: threading.Timer | None = None
        self._shown = False

    def update(self, progress: PromptProgress) -> None:
        if not self._on:
            return
        if progress.done >= progress.total:
            self.end()  # the reply starts now
            return
        with self._lock:
            self._latest = progress
            if self._shown:
                self._draw()
            elif self._timer is None:
                self._timer = threading.Timer(SHOW_AFTER_S, self._show)
                self._timer.daemon = True
                self._timer.start()

    def _show(self) -> None:
        with self._lock:
            if self._latest is not None:
                self._shown = True
                self._draw()

    def _draw(self) -> None:
        assert self._latest is not None
        write_control(self._stream, self._ERASE)
        self._stream.write(f"{progress_text(self._latest)} · Ctrl+C stops")
        self._stream.flush()

    def end(self) -> None:
        """Erase the line, if shown; nothing more is drawn."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._latest = None
            if self._shown:
                self._shown = False
                write_control(self._stream, self._ERASE)
                self._stream.flush()


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
    """Load `model`, stream the reply to `out`. Raises `KvchatError` for problems
    the user can fix."""
    from chat.engine.chat_template import PLAIN_TEMPLATE_HINT
    from chat.engine.llama import load_engine
    from chat.engine.llama_log import log_problem

    # llama-cpp-python prints model metadata to sys.stderr while loading; that
    # is noise here (llama.cpp's own log already goes to the log file).
    try:
        with _ctrl_c_held() as pressed, contextlib.redirect_stderr(io.StringIO()):
            engine = load_engine(model.path, settings.model, paths.log_file())
            engine.choose_threads(settings.model, spare_core=False)  # no UI to leave a core to
        if pressed:
            engine.close()
            raise KeyboardInterrupt
        # The reply does not need the log: a log that cannot be written is a warning.
        problem = log_problem()
        if problem is not None:
            print(f"chat: warning: {problem}", file=sys.stderr)
        if engine.plain_template_reason is not None:
            print(
                f"chat: warning: {engine.plain_template_reason} Using plain ChatML, as asked.",
                file=sys.stderr,
            )
        return _reply(engine, prompt, settings, {"model_path": str(model.path)}, as_json, out)
    except ChatTemplateError as error:
        # Plain ChatML only with the user's word: say how to give it.
        raise KvchatError(f"{error} {PLAIN_TEMPLATE_HINT}") from None


def run_oneshot_on_server(
    prompt: str,
    settings: Settings,
    server: ServerConfig,
    *,
    as_json: bool,
    out: TextIO,
) -> int:
    """Connect to the model server, stream the reply to `out`. Raises
    `ServerError` (a `KvchatError`) when the server cannot be used."""
    from chat.engine import remote

    # A plain Python connection: Ctrl+C interrupts it as it should.
    engine = remote.connect(server)
    # The URL as recorded everywhere: without a user name, password or query.
    source = {"server": public_url(server.url), "server_kind": engine.info.kind}
    return _reply(engine, prompt, settings, source, as_json, out)


def _reply(
    engine: Engine,
    prompt: str,
    settings: Settings,
    source: Mapping[str, object],
    as_json: bool,
    out: TextIO,
) -> int:
    """Stream one reply from `engine` (closed at the end) to `out`; `source`
    says in the JSON what made it (the model file, or the server)."""
    messages = []
    if settings.chat.system_prompt:
        messages.append({"role": "system", "content": settings.chat.system_prompt})
    messages.append({"role": "user", "content": prompt})
    cancel = threading.Event()
    finished: Finished | None = None
    line_open = False  # text written since the last newline
    progress = _ProgressLine(sys.stderr)
    try:
        for event in engine.stream_reply(messages, settings.sampling, cancel):
            if isinstance(event, PromptProgress):
                progress.update(event)
            elif isinstance(event, TokenEvent):
                if not as_json and event.text:
                    out.write(event.text)
                    out.flush()
                    line_open = not event.text.endswith("\n")
            else:
                finished = event
    except KvchatError:
        # The reply broke off: end its line, so that the error, on stderr,
        # starts on a line of its own.
        if line_open:
            out.write("\n")
            out.flush()
        raise
    finally:
        progress.end()
        engine.close()
    assert finished is not None
    if as_json:
        data: dict[str, object] = {
            "model": engine.info.name,
            **source,
            "reply": finished.text,
            "stats": stats_dict(finished.stats),
        }
        if finished.error is not None:
            data["error"] = finished.error
        json.dump(data, out, ensure_ascii=False)
        out.write("\n")
    elif not finished.text.endswith("\n"):
        out.write("\n")
    out.flush()
    if finished.error is not None:
        # Cut off part-way (a server's connection dropped): what came is out,
        # and the reason goes to stderr like any other error.
        raise ServerError(finished.error)
    return 0
