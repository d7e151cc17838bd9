"""A model server: what kvchat adds on top of llama-server's own figures.

llama-server (built by .ci/llama-server, or named by KVCHAT_LLAMA_SERVER, or on
PATH) serves the benchmark's model on loopback; kvchat's remote engine streams
a reply from it. Decode speed is measured where kvchat receives the tokens and
compared with the rate the server reports for the same reply; the second turn,
and a 20-turn conversation, show how much of the prompt the server's KV cache
reused with the replies sent back as their sampled ids, beside a client that
sends them as text. Without a server binary the rows are left out (said on
stderr), not failed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chat.bench.rows import Options, Row
from chat.bench.workload import SAMPLING, STORY, first_token_reply
from chat.engine.protocol import Engine, Finished, TokenEvent
from chat.settings.schema import SamplingSettings
from chat.settings.server import ServerKind

SERVER_ENV = "KVCHAT_LLAMA_SERVER"
SHORTER = "Now make it shorter."
TURN_TWO_TARGET = 20
"""Turn 2 evaluates the new message and the template's few tokens around it."""
CONVERSATION_REPLY_TOKENS = 128
"""Reply length in the long conversation: its 20 turns fit the server's window."""
# The benchmark's story, then paragraphs and lists: where a reply's text is
# most often tokenized otherwise than it was sampled.
CONVERSATION_FOLLOW_UPS = [
    "Go on with the story, in new paragraphs.",
    "List the keeper's tools as a numbered list.",
    "Describe the sea on a stormy night, in two paragraphs.",
    "Who came to visit the lighthouse? Answer with a numbered list.",
    "How did the story end? Write two paragraphs.",
]


def server_binary() -> Path | None:
    configured = os.environ.get(SERVER_ENV)
    if configured:
        return Path(configured)
    import llama_cpp

    tools = Path(os.environ.get("KVCHAT_TOOLS", Path.home() / ".cache" / "kvchat-tools"))
    # The folder .ci/llama-server builds into ("-rpc": built with the RPC backend).
    cached = tools / f"llama.cpp-{llama_cpp.__version__}-rpc" / "bin" / "llama-server"
    if cached.is_file():
        return cached
    found = shutil.which("llama-server")
    return Path(found) if found else None


def remote_rows(options: Options) -> list[Row]:
    binary = server_binary()
    if binary is None:
        return left_out("remote", f"no llama-server (run .ci/llama-server or set {SERVER_ENV})")
    return rows_on_server(
        lambda folder: LlamaServer(binary, options.model, folder),
        lambda engine: _measure(engine, options),
    )


def left_out(rows: str, why: str) -> list[Row]:
    """No rows of this kind: said on stderr, not failed."""
    print(f"{rows} rows left out: {why}", file=sys.stderr)
    return []


def rows_on_server(
    server: Callable[[Path], ServerProcess],
    measure: Callable[[Engine], list[Row]],
    kind: ServerKind = "auto",
) -> list[Row]:
    """`measure`'s rows, with kvchat's engine on `server` (made with a
    folder for its log), started for them and stopped after."""
    from chat.engine.remote import ServerConfig, connect

    with tempfile.TemporaryDirectory() as folder, server(Path(folder)) as url:
        engine = connect(ServerConfig(url, kind=kind))
        try:
            return measure(engine)
        finally:
            engine.close()


def _measure(engine: Engine, options: Options) -> list[Row]:
    sampling = replace(SAMPLING, max_tokens=options.tokens)
    story = [{"role": "user", "content": STORY}]
    times: list[float] = []
    finished: Finished | None = None
    for event in engine.stream_reply(story, sampling, threading.Event()):
        if isinstance(event, TokenEvent):
            times.append(time.perf_counter())
        elif isinstance(event, Finished):
            finished = event
    if finished is None or len(times) < 2:
        return [Row("remote: decode through kvchat (llama-server)", None, "tok/s")]
    seen = (len(times) - 1) / (times[-1] - times[0])
    server = finished.stats.decode_tps
    follow_up: list[dict[str, Any]] = [
        *story,
        sent_back(finished),
        {"role": "user", "content": SHORTER},
    ]
    second = reply_to(engine, follow_up, replace(sampling, max_tokens=8))
    rows = [
        Row(
            "remote: decode through kvchat (llama-server)",
            seen,
            "tok/s",
            ">= 97% of the server's",
            seen >= 0.97 * server if server else None,
            note=f"the server reports {server:.1f} tok/s for the same reply",
        )
    ]
    stats = second.stats
    rows.append(
        Row(
            "remote: turn 2 evaluated by the server",
            stats.prompt_evaluated,
            "tokens",
            f"<= {TURN_TWO_TARGET}",
            stats.prompt_evaluated <= TURN_TWO_TARGET,
            note=(
                f"of {stats.prompt_tokens:,} sent; {stats.prompt_reused:,} reused from its "
                f"cache; first token {stats.ttft_s * 1000:.0f} ms; the reply goes back as "
                "its sampled ids"
            ),
        )
    )
    rows.append(_text_turn_two(engine, story, sampling, finished.text))
    rows += _overhead_rows(engine, story)
    rows += _conversation_rows(engine, options)
    return rows


def sent_back(finished: Finished) -> dict[str, Any]:
    """The reply as kvchat saves it and sends it back: its text and its
    sampled ids."""
    message: dict[str, Any] = {"role": "assistant", "content": finished.text}
    if finished.token_ids is not None:
        message["token_ids"] = list(finished.token_ids)
    return message


def reply_to(
    engine: Engine, messages: list[dict[str, Any]], sampling: SamplingSettings
) -> Finished:
    for event in engine.stream_reply(messages, sampling, threading.Event()):
        if isinstance(event, Finished):
            return event
    raise RuntimeError("the reply ended without its figures")


@dataclass
class _Turn:
    """A reply as a client sees it, and how it sends it back."""

    message: dict[str, Any]
    """The reply as the next turn's prompt holds it."""
    prompt_tokens: int
    evaluated: int
    held: int
    """Tokens of the reply the server's cache holds (see `_held`)."""
    ttft_s: float


def _kvchat_turn(
    engine: Engine, messages: list[dict[str, Any]], sampling: SamplingSettings
) -> _Turn:
    done = reply_to(engine, messages, sampling)
    stats = done.stats
    return _Turn(
        sent_back(done),
        stats.prompt_tokens,
        stats.prompt_evaluated,
        _held(stats.generated_tokens, stats.finish_reason == "done"),
        stats.ttft_s,
    )


def _text_turn(url: str, messages: list[dict[str, Any]], sampling: SamplingSettings) -> _Turn:
    """One turn as llama.cpp's web UI asks for it: the messages as text to
    `/v1/chat/completions`, streamed; the server renders and tokenizes them."""
    body = {
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "stream": True,
        "cache_prompt": True,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "seed": sampling.seed,
        "max_tokens": sampling.max_tokens,
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    timings: dict[str, int] = {}
    finish = ""
    with urllib.request.urlopen(request, timeout=600) as answer:
        for line in answer:
            if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                continue
            event = json.loads(line[5:])
            for choice in event.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    first = first or time.perf_counter()
                    text.append(piece)
                finish = choice.get("finish_reason") or finish
            timings = event.get("timings") or timings
    prompt_n, cache_n, predicted_n = timings["prompt_n"], timings["cache_n"], timings["predicted_n"]
    ended_itself = finish == "stop"
    return _Turn(
        {"role": "assistant", "content": "".join(text)},
        prompt_n + cache_n,
        prompt_n,
        # predicted_n counts the end-of-turn token of a reply that ended itself.
        _held(predicted_n - 1 if ended_itself else predicted_n, ended_itself),
        (first or time.perf_counter()) - started,
    )


def _held(reply_tokens: int, ended_itself: bool) -> int:
    """Tokens of a reply (its end-of-turn token not counted) that the
    server's cache holds after it: the last token sampled is never evaluated,
    so a reply that ended itself holds them all (its end-of-turn token is the
    one left out), and one cut by max tokens all but its last."""
    return reply_tokens if ended_itself else max(0, reply_tokens - 1)


def _text_turn_two(
    engine: Engine, story: list[dict[str, str]], sampling: SamplingSettings, kvchat_reply: str
) -> Row:
    """Turn 2 of the same conversation as a client that sends text asks for it."""
    url = engine.info.server_url
    assert url is not None
    first = _text_turn(url, story, sampling)
    follow_up = [
        *story,
        first.message,
        {"role": "user", "content": SHORTER},
    ]
    second = _text_turn(url, follow_up, replace(sampling, max_tokens=8))
    same = first.message["content"] == kvchat_reply
    same_words = "the same first reply as kvchat's" if same else "another first reply"
    return Row(
        "remote: turn 2 evaluated, a client that sends text",
        second.evaluated,
        "tokens",
        note=(
            f"of {second.prompt_tokens:,} sent; what llama.cpp's web UI does (the reply as "
            f"text, tokenized again by the server); {same_words}; first token "
            f"{second.ttft_s * 1000:.0f} ms"
        ),
    )


def _conversation_rows(engine: Engine, options: Options) -> list[Row]:
    """A conversation of `options.turns` turns, the same messages and seeds,
    through kvchat and then as a client that sends text (each with the slot
    to itself): how many of the earlier replies' tokens the server evaluated
    again. At each turn after the first, what is new is the prompt beyond the
    last prompt and the tokens of the last reply the cache holds (`_held`);
    the rest of what the server evaluated is a reply read again."""
    url = engine.info.server_url
    assert url is not None
    sampling = replace(SAMPLING, max_tokens=min(options.tokens, CONVERSATION_REPLY_TOKENS))
    again: dict[str, int] = {}
    replies: dict[str, int] = {}
    evaluated: dict[str, int] = {}
    clients: dict[str, Callable[[list[dict[str, Any]], SamplingSettings], _Turn]] = {
        "kvchat": lambda messages, turn_sampling: _kvchat_turn(engine, messages, turn_sampling),
        "text": lambda messages, turn_sampling: _text_turn(url, messages, turn_sampling),
    }
    asks = [STORY, *CONVERSATION_FOLLOW_UPS]
    for client, take_turn in clients.items():
        messages: list[dict[str, Any]] = []
        again[client], replies[client], evaluated[client] = 0, 0, 0
        before = (0, 0)  # the last prompt's size, the tokens of its reply held
        for turn in range(options.turns):
            messages.append({"role": "user", "content": asks[turn % len(asks)]})
            done = take_turn(messages, replace(sampling, seed=(SAMPLING.seed or 0) + turn))
            messages.append(done.message)
            if turn > 0:  # the first finds the cache as the last client left it
                again[client] += max(0, done.evaluated - (done.prompt_tokens - sum(before)))
                evaluated[client] += done.evaluated
            before = (done.prompt_tokens, done.held)
            replies[client] += done.held
    turns = options.turns
    return [
        Row(
            f"remote: {turns} turns, reply tokens evaluated again (kvchat)",
            again["kvchat"],
            "tokens",
            "0",
            again["kvchat"] == 0,
            note=(
                f"of {replies['kvchat']:,} reply tokens; {evaluated['kvchat']:,} prompt tokens "
                "evaluated after turn 1; each reply goes back as its sampled ids"
            ),
        ),
        Row(
            f"remote: {turns} turns, reply tokens evaluated again (a client that sends text)",
            again["text"],
            "tokens",
            note=(
                f"of {replies['text']:,} reply tokens; {evaluated['text']:,} prompt tokens "
                "evaluated after turn 1; the same messages and seeds, its own replies sent back as "
                "text (llama.cpp's web UI)"
            ),
        ),
    ]


def _overhead_rows(engine: Engine, story: list[dict[str, str]]) -> list[Row]:
    """What kvchat adds to the server's own first-token time, against a bare
    HTTP client sending the same prompt (both find it in the server's cache:
    the difference is kvchat's work, not the server's); and what the context
    meter's count of a new draft costs (llama-server renders and tokenizes it:
    two requests, made off the UI thread)."""
    url = engine.info.server_url
    assert url is not None
    rendered = _post(url, "/apply-template", {"messages": story, "add_generation_prompt": True})
    prompt = str(rendered["prompt"])
    kvchat_s: list[float] = []
    bare_s: list[float] = []
    for _ in range(11):  # in turns, the first of each a warm-up
        kvchat_s.append(first_token_reply(engine, story).stats.ttft_s)
        bare_s.append(_bare_first_token_s(url, prompt))
    added_ms = (statistics.median(kvchat_s[1:]) - statistics.median(bare_s[1:])) * 1000
    counts_ms = []
    for draft in range(10):
        draft_message = {"role": "user", "content": f"A new draft, number {draft}."}
        started = time.perf_counter()
        engine.tokenize_chat([*story, draft_message])
        counts_ms.append((time.perf_counter() - started) * 1000)
    return [
        Row(
            "remote: first token, kvchat minus a bare HTTP client",
            added_ms,
            "ms",
            "<= 5 ms",
            added_ms <= 5,
            note=f"medians of 10: kvchat {statistics.median(kvchat_s[1:]) * 1000:.1f} ms, "
            f"bare client {statistics.median(bare_s[1:]) * 1000:.1f} ms (urllib, a connection "
            "per request; kvchat keeps one open), prompt cached",
        ),
        Row(
            "remote: the meter's count of a new draft",
            statistics.median(counts_ms),
            "ms",
            note="median; two requests to llama-server, made in a thread: typing never waits",
        ),
    ]


def _post(url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return dict(json.loads(answer.read()))


def _bare_first_token_s(url: str, prompt: str) -> float:
    """A minimal streaming client: the prompt as text, one token asked for."""
    body = {"prompt": prompt, "n_predict": 1, "stream": True, "cache_prompt": True}
    request = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        for line in answer:
            if line.startswith(b"data:"):
                waited = time.perf_counter() - started
                break
        else:
            raise RuntimeError("llama-server streamed nothing")
        answer.read()  # the rest of the stream, so the slot is free for the next request
    return waited


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A server program on loopback (`command`, at `port`), started and ready
    (its `ready_path` answers) on entering; stopped after."""

    def __init__(
        self,
        name: str,
        command: list[str],
        port: int,
        log: Path,
        ready_path: str,
        env: dict[str, str] | None = None,
        start_s: float = 120,
    ) -> None:
        self.name, self.command, self.port, self.log = name, command, port, log
        self.ready_path, self.env, self.start_s = ready_path, env, start_s
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + self.start_s
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}{self.ready_path}", timeout=1) as answer:
                    if answer.status == 200:
                        return url
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"{self.name} did not start; its log: {self.log}")

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


class LlamaServer(ServerProcess):
    """llama-server with `model` on a free loopback port, ready; stopped after.
    One slot; `threads` (default: every CPU) and a `context` of 4,096 tokens
    unless told; `extra` arguments after those (`--jinja`, `--rpc` ...)."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        folder: Path,
        *,
        threads: int | None = None,
        context: int = 4096,
        extra: Sequence[str] = (),
    ) -> None:
        port = free_port()
        threads = threads if threads is not None else os.cpu_count() or 1
        command = [
            str(binary),
            *("-m", str(model), "--host", "127.0.0.1", "--port", str(port)),
            *("-c", str(context), "--parallel", "1", "--threads", str(threads)),
            *extra,
        ]
        super().__init__("llama-server", command, port, folder / "llama-server.log", "/health")
