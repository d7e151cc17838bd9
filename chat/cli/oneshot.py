"""One-shot mode: `chat -p "prompt"` streams one reply to stdout and exits.

Like `ollama run model "prompt"` or `llm "prompt"`: plain text, safe for a
terminal or a pipe; `--json` prints the reply and its statistics instead. The
reply comes from a model loaded here (`run_oneshot`) or from a model server
(`run_oneshot_on_server`, with `--server` or `[server] url`).

A reasoning model's reply is split (chat.engine.reasoning): stdout gets the
answer alone, so that a pipe or a script sees what it asked for; the thinking
goes to stderr, dim, when that is a terminal (a person is watching), and
nowhere otherwise or with `--hide-thinking`. `--json` has both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from chat import paths
from chat.cli.terminal_output import write_control
from chat.conversations.conversation import ReplyStats
from chat.engine.protocol import ChatMessage, Engine, Finished, PromptProgress, TokenEvent
from chat.engine.reasoning.markers import Reasoning
from chat.engine.reasoning.splitter import ReplyPart, ThinkingSplitter, token_parts
from chat.errors import ChatTemplateError, KvchatError, ServerError
from chat.models.files import ModelCandidate
from chat.safe_files import read_text, shown_path
from chat.session.prompt_progress import SHOW_AFTER_S, progress_text
from chat.settings.schema import Settings
from chat.settings.server import public_url

if TYPE_CHECKING:  # the remote engine is imported only when a server is used
    from chat.cli.oneshot_tools import OneShotTools
    from chat.engine.remote import ServerConfig

SCHEMA_FILE_LIMIT = 1024 * 1024


def json_schema_grammar(path: Path) -> str:
    """The grammar of a reply that is JSON valid for the schema in `path`
    (`--json-schema FILE`). Raises KvchatError saying what is wrong with
    the file, before any model is loaded."""
    from chat.engine.tool_calls.grammar import SchemaGrammarError, schema_grammar

    text = read_text(path, SCHEMA_FILE_LIMIT, what="JSON Schema file")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise KvchatError(
            f"The JSON Schema file {shown_path(path)} is not JSON (line {error.lineno}, "
            f"column {error.colno}: {error.msg})."
        ) from None
    try:
        return schema_grammar(schema)
    except SchemaGrammarError as error:
        where = shown_path(path)
        raise KvchatError(f"The JSON Schema file {where} cannot be used: {error}.") from None


def stats_dict(stats: ReplyStats) -> dict[str, object]:
    data = dataclasses.asdict(stats)
    data["prompt_reused"] = stats.prompt_reused
    data["answer_tokens"] = stats.generated_tokens - stats.thinking_tokens
    return data


class _ReplyPrinter:
    """One reply as one-shot mode prints it, piece by piece: the answer to
    `out`; a reasoning model's thinking (split from the text by its markers)
    to `err`, dim, when `show_thinking` and `err` is a terminal. The thinking
    is model output like the answer: the engine's text is sanitised, and a
    terminal's stderr passes through chat.cli.terminal_output's filter too;
    only the dim on and off are written past it."""

    _DIM, _NORMAL = "\x1b[2m", "\x1b[22m"

    def __init__(
        self, reasoning: Reasoning | None, out: TextIO, err: TextIO, show_thinking: bool
    ) -> None:
        self._out, self._err = out, err
        self._splitter = (
            None
            if reasoning is None
            else ThinkingSplitter(reasoning.markers, starts_inside=reasoning.prompt_opens_block)
        )
        self._thinking_shown = show_thinking and err.isatty()
        self._dim = False  # the thinking is being written to `err`
        self._thinking_line_open = False
        self.line_open = False
        """Answer text written to `out` since its last newline."""
        self.first_answer_at: float | None = None
        self.answer = ""
        self.thinking = ""

    def token(self, event: TokenEvent) -> None:
        if event.tool_call:
            return  # a call's text: stderr tells of the call (chat.cli.oneshot_tools)
        for part in token_parts(event, self._splitter):
            self.part(part)

    def part(self, part: ReplyPart) -> None:
        """A run of the reply of one kind (a server's thinking field goes here too)."""
        if not part.text:
            return
        if part.kind == "thinking":
            self.thinking += part.text
            if self._thinking_shown:
                if not self._dim:
                    write_control(self._err, self._DIM)
                    self._dim = True
                self._err.write(part.text)
                self._err.flush()
                self._thinking_line_open = not part.text.endswith("\n")
            return
        if self.first_answer_at is None:
            self.first_answer_at = time.perf_counter()
        self.end_thinking()
        self.answer += part.text
        self._out.write(part.text)
        self._out.flush()
        self.line_open = not part.text.endswith("\n")

    def finish(self) -> None:
        """The reply ended: what the splitter held back is printed."""
        if self._splitter is not None:
            for part in self._splitter.flush():
                self.part(part)
        self.end_thinking()

    def end_thinking(self) -> None:
        """The thinking shown ends: normal text again, and a blank line before
        the answer (stdout and stderr are often the same terminal)."""
        if not self._dim:
            return
        self._dim = False
        write_control(self._err, self._NORMAL)
        self._err.write("\n\n" if self._thinking_line_open else "\n")
        self._err.flush()

    @property
    def splitter(self) -> ThinkingSplitter | None:
        return self._splitter

    def stats(self, stats: ReplyStats, started: float) -> ReplyStats:
        """The engine's stats with the thinking counted, when the reply was split."""
        splitter = self._splitter
        if splitter is None or not splitter.saw_thinking:
            return stats
        first_answer = None if self.first_answer_at is None else self.first_answer_at - started
        return dataclasses.replace(
            stats, thinking_tokens=splitter.thinking_tokens, first_answer_s=first_answer
        )


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
    show_thinking: bool = True,
    grammar: str | None = None,
    tools: OneShotTools | None = None,
) -> int:
    """Load `model`, stream the reply to `out`. Raises `KvchatError` for problems
    the user can fix. `grammar`: the reply is sampled under it (`--json-schema`);
    `tools`: the turn may call the tools allowed (`--allow-tool`)."""
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
        if engine.info.gpu_missing and settings.model.n_gpu_layers != 0:
            # Layers were asked on a GPU that is not there: say so once.
            print(
                f"chat: warning: {engine.info.gpu_missing}: the model runs on the CPU.",
                file=sys.stderr,
            )
        source = {"model_path": str(model.path), "device": engine.info.device_text()}
        engine.grammar = grammar
        return _reply(engine, prompt, settings, source, as_json, out, show_thinking, tools)
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
    show_thinking: bool = True,
    tools: OneShotTools | None = None,
) -> int:
    """Connect to the model server, stream the reply to `out`. Raises
    `ServerError` (a `KvchatError`) when the server cannot be used.
    `tools`: the turn may call the tools allowed (`--allow-tool`)."""
    from chat.engine import remote

    # A plain Python connection: Ctrl+C interrupts it as it should.
    engine = remote.connect(server)
    # The URL as recorded everywhere: without a user name, password or query.
    source = {"server": public_url(server.url), "server_kind": engine.info.kind}
    return _reply(engine, prompt, settings, source, as_json, out, show_thinking, tools)


def _tool_turn(
    engine: Engine,
    messages: list[ChatMessage],
    settings: Settings,
    tools: OneShotTools,
    printer: _ReplyPrinter,
    progress: _ProgressLine,
) -> tuple[Finished, dict[str, object], str | None]:
    """The turn with its tool loop: the last reply, what the JSON adds (each
    call, each reply's figures), and why the turn ended early (None when
    the model answered)."""
    from chat.cli.oneshot_tools import run_tool_turn

    outcome = run_tool_turn(
        engine, messages, settings.sampling, tools, printer.token, on_progress=progress.update
    )
    if not outcome.steps:  # the first reply failed
        raise KvchatError(outcome.problem or "The model gave no reply.")
    calls: list[dict[str, object]] = [
        {
            "server": record.server,
            "tool": record.tool,
            "arguments": dict(record.call.arguments),
            "outcome": record.outcome,
            "result": record.result,
            "duration_s": record.duration_s,
        }
        for step in outcome.steps
        for record in step.calls
    ]
    # Each reply's figures: after a call, only the call and its result are evaluated.
    steps = [stats_dict(step.finished.stats) for step in outcome.steps]
    return outcome.steps[-1].finished, {"tool_calls": calls, "steps": steps}, outcome.problem


def _no_answer(stats: ReplyStats, settings: Settings) -> str:
    """Why a reply that ended mid-thought has no answer, in a sentence."""
    why = {
        "done": "the model ended it",
        "stopped": "it was stopped",
        "max_tokens": f"it reached --max-tokens {settings.sampling.max_tokens}",
        "context_full": "the context window is full",
        "error": "it failed",
    }[stats.finish_reason]
    return f"the reply ended while the model was still thinking ({why}): there is no answer."


def _reply(
    engine: Engine,
    prompt: str,
    settings: Settings,
    source: Mapping[str, object],
    as_json: bool,
    out: TextIO,
    show_thinking: bool,
    tools: OneShotTools | None = None,
) -> int:
    """Stream one reply from `engine` (closed at the end) to `out`; `source`
    says in the JSON what made it (the model file, or the server). With
    `tools`, the reply is a turn of the tool loop (chat.cli.oneshot_tools)."""
    messages: list[ChatMessage] = []
    if settings.chat.system_prompt:
        messages.append({"role": "system", "content": settings.chat.system_prompt})
    messages.append({"role": "user", "content": prompt})
    cancel = threading.Event()
    finished: Finished | None = None
    engine.set_thinking(settings.sampling.thinking)  # before the splitter reads how it thinks
    # With --json nothing streams: the JSON says it all at the end.
    streamed = io.StringIO() if as_json else out
    printer = _ReplyPrinter(
        engine.info.reasoning, streamed, sys.stderr, show_thinking and not as_json
    )
    progress = _ProgressLine(sys.stderr)
    started = time.perf_counter()
    tool_data: dict[str, object] = {}
    problem: str | None = None
    try:
        if tools is not None:
            finished, tool_data, problem = _tool_turn(
                engine, messages, settings, tools, printer, progress
            )
        else:
            for event in engine.stream_reply(messages, settings.sampling, cancel):
                if isinstance(event, PromptProgress):
                    progress.update(event)
                elif isinstance(event, TokenEvent):
                    printer.token(event)
                else:
                    finished = event
        printer.finish()
    except KvchatError:
        # The reply broke off: end its line, so that the error, on stderr,
        # starts on a line of its own.
        printer.end_thinking()
        if printer.line_open and not as_json:
            out.write("\n")
            out.flush()
        raise
    finally:
        printer.end_thinking()  # Ctrl+C mid-thought: the terminal's text is normal again
        progress.end()
        engine.close()
    assert finished is not None
    stats = printer.stats(finished.stats, started)
    splitter = printer.splitter
    # The answer alone: a reply split by its markers is the splitter's answer.
    answer = finished.text if splitter is None else splitter.answer
    if as_json:
        data: dict[str, object] = {
            "model": engine.info.name,
            **source,
            "reply": answer,
            "thinking": "" if splitter is None else splitter.thinking,
            "stats": stats_dict(stats),
        }
        data.update(tool_data)
        if finished.error is not None:
            data["error"] = finished.error
        json.dump(data, out, ensure_ascii=False)
        out.write("\n")
    elif splitter is not None and splitter.in_thinking and not answer:
        # Nothing for stdout: say why, where the errors go.
        print(f"chat: warning: {_no_answer(stats, settings)}", file=sys.stderr)
    elif not answer.endswith("\n"):
        out.write("\n")
    out.flush()
    if problem is not None:
        raise KvchatError(problem)
    if finished.error is not None:
        # Cut off part-way (a server's connection dropped): what came is out,
        # and the reason goes to stderr like any other error.
        raise ServerError(finished.error)
    return 0
