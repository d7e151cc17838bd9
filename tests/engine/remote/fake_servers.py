"""Small fake model servers on loopback, real HTTP, for the server kinds that
cannot be installed here (vLLM, Ollama, a generic OpenAI-compatible one).

Each answers as its documentation says (paths, JSON shapes, SSE or JSON-lines
streams), with a toy tokenizer (one token per word, ids from the word), and
records the requests it got so tests can check what was sent. A stream can be
made to break: a malformed or oversized line, or a dropped connection.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    """Sent besides Content-Type and Content-Length (a redirect's Location)."""


@dataclass
class Stream:
    """Lines sent one by one (`delay_s` apart); `drop`: the connection is cut
    after the last one, without ending the response."""

    lines: list[bytes]
    content_type: str = "text/event-stream"
    delay_s: float = 0.0
    drop: bool = False


Route = Callable[[Any], Reply | Stream]


@dataclass
class Seen:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that says nothing when a client goes away (a
    reply cancelled, a connection the engine drops): the tests make that
    happen, and socketserver would print its traceback amid the test run."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass
class FakeServer:
    routes: dict[tuple[str, str], Route]
    api_key: str | None = None
    seen: list[Seen] = field(default_factory=list)
    stream_closed: threading.Event = field(default_factory=threading.Event)
    """Set when a client went away mid-stream (a write failed)."""
    tls: ssl.SSLContext | None = None
    """Serve HTTPS with this context."""
    _connections: set[socket.socket] = field(default_factory=set)

    def start(self, port: int = 0) -> None:
        """Serve on `port` (0: any free one; a port given again brings a
        stopped server back where clients look for it)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server._connections.add(self.connection)

            def finish(self) -> None:
                server._connections.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                server.seen.append(Seen(method, self.path, body, dict(self.headers)))
                if server.api_key and self.headers.get("Authorization") != (
                    f"Bearer {server.api_key}"
                ):
                    return self._json(Reply(401, {"error": {"message": "Invalid API Key"}}))
                route = server.routes.get((method, self.path))
                if route is None:
                    return self._json(Reply(404, {"error": "not found"}))
                answer = route(body)
                if isinstance(answer, Reply):
                    return self._json(answer)
                return self._stream(answer)

            def _json(self, reply: Reply) -> None:
                # bytes go as they are (an HTML error page, garbage)
                raw = reply.body
                data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, stream: Stream) -> None:
                self.send_response(200)
                self.send_header("Content-Type", stream.content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for line in stream.lines:
                        chunk = line + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        if stream.delay_s:
                            time.sleep(stream.delay_s)
                    if stream.drop:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    server.stream_closed.set()
                    self.close_connection = True

        self._server = QuietServer(("127.0.0.1", port), Handler)
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop as a killed server does: open (kept-alive) connections too."""
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self._connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def last(self, path: str) -> Seen:
        return [s for s in self.seen if s.path == path][-1]


# -- a toy tokenizer ------------------------------------------------------------------


def toy_tokens(messages: list[dict[str, str]], add_generation_prompt: bool) -> list[int]:
    """Two marker tokens per message, one per word; two more to open the reply."""
    tokens: list[int] = []
    for message in messages:
        tokens += [1, 2] + [3 + len(word) for word in message["content"].split()]
    return tokens + ([1, 4] if add_generation_prompt else [])


REPLY_WORDS = ["Hello", " there", ",", " friend", "."]


def sse(events: list[Any], done: bool = True) -> list[bytes]:
    lines = [b"data: " + json.dumps(e).encode() + b"\n" for e in events]
    return lines + ([b"data: [DONE]\n"] if done else [])


# -- vLLM --------------------------------------------------------------------------------

VLLM_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def vllm_routes(
    words: list[str] = REPLY_WORDS,
    finish: str = "stop",
    cached: int = 0,
    stream_lines: Callable[[list[bytes]], list[bytes]] | None = None,
    delay_s: float = 0.0,
) -> dict[tuple[str, str], Route]:
    def tokenize(body: Any) -> Reply:
        tokens = toy_tokens(body["messages"], body.get("add_generation_prompt", True))
        return Reply(body={"count": len(tokens), "max_model_len": 8192, "tokens": tokens})

    def completions(body: Any) -> Stream:
        prompt = body["prompt"]
        assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        events = []
        for i, word in enumerate(words):
            logprobs = None
            if body.get("logprobs"):
                logprobs = {
                    "text_offset": [0],
                    "token_logprobs": [-0.1],
                    "tokens": [word],
                    "top_logprobs": [{word: -0.1, " other": -2.5}],
                }
            last = i == len(words) - 1
            events.append(
                {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "created": 1,
                    "model": VLLM_MODEL,
                    "choices": [
                        {
                            "index": 0,
                            "text": word,
                            "logprobs": logprobs,
                            "finish_reason": finish if last else None,
                            "stop_reason": None,
                        }
                    ],
                }
            )
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(words),
            "total_tokens": len(prompt) + len(words),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        events.append({"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": usage})
        lines = sse(events)
        return Stream(stream_lines(lines) if stream_lines else lines, delay_s=delay_s)

    return {
        ("GET", "/version"): lambda _: Reply(body={"version": "0.11.0"}),
        ("GET", "/health"): lambda _: Reply(body=None),
        ("GET", "/v1/models"): lambda _: Reply(
            body={
                "object": "list",
                "data": [
                    {
                        "id": VLLM_MODEL,
                        "object": "model",
                        "owned_by": "vllm",
                        "root": VLLM_MODEL,
                        "max_model_len": 8192,
                    }
                ],
            }
        ),
        ("POST", "/tokenize"): tokenize,
        ("POST", "/v1/completions"): completions,
    }


# -- Ollama ------------------------------------------------------------------------------

OLLAMA_MODEL = "llama3.2:latest"


def ollama_routes(
    num_ctx: int | None = 8192,
    words: list[str] = REPLY_WORDS,
    prompt_eval_count: int = 40,
    done_reason: str = "stop",
    logprobs: bool = False,
    thinking: list[str] | None = None,
    capabilities: list[str] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[tuple[str, str], Route]:
    """`thinking`: streamed first, in `message.thinking` (Ollama's field when
    the request's `think` is on). `capabilities`: what `/api/show` lists (not
    listed when None, as older Ollama). `tool_calls`: sent whole in one
    message after the words, as Ollama sends a reply's calls."""

    def show(body: Any) -> Reply:
        if body["model"] != OLLAMA_MODEL:
            return Reply(404, {"error": f"model '{body['model']}' not found"})
        parameters = 'stop "<|eot_id|>"'
        if num_ctx is not None:
            parameters += f"\nnum_ctx                        {num_ctx}"
        return Reply(
            body={
                "modelfile": "FROM llama3.2",
                "parameters": parameters,
                "template": "{{ .Prompt }}",
                "details": {"family": "llama", "parameter_size": "3.2B"},
                "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
                **({} if capabilities is None else {"capabilities": capabilities}),
            }
        )

    def chat(body: Any) -> Stream:
        lines = []
        for piece in thinking or []:
            message = {"role": "assistant", "content": "", "thinking": piece}
            lines.append(json.dumps({"model": OLLAMA_MODEL, "message": message}).encode())
        for word in words:
            event: dict[str, Any] = {
                "model": OLLAMA_MODEL,
                "created_at": "2025-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": word},
                "done": False,
            }
            if logprobs and body.get("logprobs"):
                event["logprobs"] = [
                    {
                        "token": word,
                        "logprob": -0.2,
                        "top_logprobs": [
                            {"token": word, "logprob": -0.2},
                            {"token": " nope", "logprob": -3.0},
                        ],
                    }
                ]
            lines.append(json.dumps(event).encode())
        if tool_calls:
            message = {"role": "assistant", "content": "", "tool_calls": tool_calls}
            event = {"model": OLLAMA_MODEL, "message": message, "done": False}
            lines.append(json.dumps(event).encode())
        final = {
            "model": OLLAMA_MODEL,
            "created_at": "2025-01-01T00:00:01Z",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": done_reason,
            "total_duration": 900_000_000,
            "load_duration": 1_000_000,
            "prompt_eval_count": prompt_eval_count,
            "prompt_eval_duration": 100_000_000,
            "eval_count": len(words),
            "eval_duration": 250_000_000,
        }
        lines.append(json.dumps(final).encode())
        return Stream(lines, content_type="application/x-ndjson")

    return {
        ("GET", "/api/version"): lambda _: Reply(body={"version": "0.12.6"}),
        ("GET", "/api/tags"): lambda _: Reply(
            body={
                "models": [
                    {"name": OLLAMA_MODEL, "model": OLLAMA_MODEL, "size": 2019393189},
                    {"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size": 397821319},
                ]
            }
        ),
        ("POST", "/api/show"): show,
        ("POST", "/api/chat"): chat,
        ("GET", "/v1/models"): lambda _: Reply(
            body={"object": "list", "data": [{"id": OLLAMA_MODEL, "object": "model"}]}
        ),
    }


# -- a generic OpenAI-compatible server ------------------------------------------------------

OPENAI_MODEL = "some-model"


def openai_routes(
    words: list[str] = REPLY_WORDS,
    prompt_tokens: int = 30,
    finish: str = "stop",
    stream_lines: Callable[[list[bytes]], list[bytes]] | None = None,
    delay_s: float = 0.0,
    drop: bool = False,
    model_entry: dict[str, Any] | None = None,
    thinking: list[str] | None = None,
    thinking_field: str = "reasoning_content",
) -> dict[tuple[str, str], Route]:
    """`thinking`: streamed first, each piece in a delta's `thinking_field`
    (llama-server's and DeepSeek's name; vLLM's newer one is "reasoning")."""

    def chat(body: Any) -> Stream:
        events = []
        for piece in thinking or []:
            delta = {thinking_field: piece}
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            events.append({"id": "c1", "object": "chat.completion.chunk", "choices": [choice]})
        for i, word in enumerate(words):
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": word},
                "finish_reason": finish if i == len(words) - 1 and not drop else None,
            }
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": word,
                            "logprob": -0.05,
                            "bytes": list(word.encode()),
                            "top_logprobs": [
                                {"token": word, "logprob": -0.05, "bytes": None},
                                {"token": " else", "logprob": -3.2, "bytes": None},
                            ],
                        }
                    ]
                }
            events.append({"id": "c1", "object": "chat.completion.chunk", "choices": [choice]})
        if not drop:
            events.append(
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": len(words),
                        "total_tokens": prompt_tokens + len(words),
                    },
                }
            )
        lines = sse(events, done=not drop)
        lines = stream_lines(lines) if stream_lines else lines
        return Stream(lines, delay_s=delay_s, drop=drop)

    entry = model_entry or {"id": OPENAI_MODEL, "object": "model", "owned_by": "me"}
    return {
        ("GET", "/v1/models"): lambda _: Reply(body={"object": "list", "data": [entry]}),
        ("POST", "/v1/chat/completions"): chat,
    }


class RawServer:
    """Not an HTTP server: whatever connects gets `answer` (raw bytes, maybe
    nothing), then the connection closes. What a wrong port or a broken proxy
    looks like from the client."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(self.answer)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


def llama_server_routes(
    props: dict[str, Any] | None = None, models: Any = None
) -> dict[tuple[str, str], Route]:
    """Enough of llama-server to be detected and attached to: `/props` (its
    window per slot, its model), `/v1/models` when given."""
    answer = props or {
        "default_generation_settings": {"n_ctx": 4096},
        "model_path": "/models/demo.gguf",
    }
    routes: dict[tuple[str, str], Route] = {("GET", "/props"): lambda _: Reply(body=answer)}
    if models is not None:
        routes[("GET", "/v1/models")] = lambda _: Reply(body=models)
    return routes


def tool_calls_chat(
    text: str, calls: list[tuple[str, str, list[str]]], prompt_tokens: int = 30
) -> Route:
    """A chat completions stream (OpenAI's, as vLLM and llama-server send it)
    whose reply says `text`, then calls tools: (id, name, the arguments' JSON
    in pieces), each call's pieces in deltas of their own, by `index`."""

    def chat(body: Any) -> Stream:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}

        events = [chunk({"role": "assistant", "content": text})]
        for index, (call_id, name, pieces) in enumerate(calls):
            first = {"name": name, "arguments": ""}
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {"index": index, "id": call_id, "type": "function", "function": first}
                        ]
                    }
                )
            )
            for piece in pieces:
                events.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": 39}
        events.append(
            {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
        return Stream(sse(events))

    return chat


def slow_words(count: int) -> list[str]:
    return [f" w{i}" for i in range(count)]


def serve(routes: dict[tuple[str, str], Route], api_key: str | None = None) -> FakeServer:
    server = FakeServer(routes, api_key)
    server.start()
    return server


# -- vLLM with a real model ----------------------------------------------------------------

N_CTX = 2048
"""The fake's `max_model_len`."""
BLOCK_TOKENS = 16
"""vLLM's default KV-cache block: its prefix cache reuses whole blocks only."""


@dataclass
class VllmModel:
    """The demo model behind a fake vLLM, answering as vLLM's OpenAI server
    documents it: `/tokenize` renders `messages` with the model's chat
    template and tokenizes the text (special tokens parsed, none added unless
    `add_special_tokens`), `/detokenize` writes ids with special tokens,
    `/v1/completions` samples from a prompt of token ids and streams one chunk
    a token (`token_ids` with `return_token_ids`; the end-of-turn token comes
    with no text), and `usage` says how many prompt tokens its prefix cache
    held (`cached_tokens`, whole blocks, from the last prompt and reply).

    `chat_template` replaces the model's; `token_ids` False is a vLLM too old
    for `return_token_ids`; `token_prompts` False refuses a prompt of ids, as
    a gateway that offers only the chat API does (400)."""

    path: str
    chat_template: str | None = None
    token_ids: bool = True
    token_prompts: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cached: list[int] = field(default_factory=list)
    """The tokens of the last prompt and reply, as its prefix cache holds them."""
    _reused: int = 0
    _llm: Any = None

    def __post_init__(self) -> None:
        import llama_cpp

        self._llm = llama_cpp.Llama(self.path, n_ctx=N_CTX, verbose=False)
        if self.chat_template is None:
            self.chat_template = str(self._llm.metadata["tokenizer.chat_template"])

    def routes(self) -> dict[tuple[str, str], Route]:
        routes = vllm_routes()
        models = routes[("GET", "/v1/models")](None)
        assert isinstance(models, Reply)
        models.body["data"][0]["max_model_len"] = N_CTX
        routes[("GET", "/v1/models")] = lambda _: models
        routes[("POST", "/tokenize")] = self.tokenize
        routes[("POST", "/detokenize")] = self.detokenize
        routes[("POST", "/v1/completions")] = self.completions
        routes[("POST", "/v1/chat/completions")] = self.chat
        return routes

    def render(self, body: dict[str, Any]) -> str:
        import jinja2.sandbox

        template = jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(
            self.chat_template or ""
        )
        options = body.get("chat_template_kwargs") or {}
        return template.render(
            messages=body["messages"],
            add_generation_prompt=body.get("add_generation_prompt", True),
            bos_token="<|im_start|>",
            eos_token="<|im_end|>",
            **options,
        )

    def tokens(self, text: str, add_special: bool) -> list[int]:
        with self._lock:
            return list(self._llm.tokenize(text.encode(), add_bos=add_special, special=True))

    def tokenize(self, body: Any) -> Reply:
        if "messages" in body:
            tokens = self.tokens(self.render(body), body.get("add_special_tokens", False))
        else:
            tokens = self.tokens(body["prompt"], body.get("add_special_tokens", True))
        return Reply(body={"count": len(tokens), "max_model_len": N_CTX, "tokens": tokens})

    def _unknown(self, ids: list[Any]) -> Reply | None:
        vocab = self._llm.n_vocab()
        if all(type(i) is int and 0 <= i < vocab for i in ids):
            return None
        return Reply(400, {"object": "error", "message": "Token id out of vocabulary", "code": 400})

    def detokenize(self, body: Any) -> Reply:
        refused = self._unknown(body["tokens"])
        if refused is not None:
            return refused
        with self._lock:
            text = self._llm.detokenize(body["tokens"], special=True)
        return Reply(body={"prompt": text.decode("utf-8", errors="replace")})

    def completions(self, body: Any) -> Reply | Stream:
        prompt = body["prompt"]
        if not self.token_prompts and not isinstance(prompt, str):
            return Reply(400, {"object": "error", "message": "prompt must be a string"})
        if isinstance(prompt, str):
            prompt = self.tokens(prompt, True)
        refused = self._unknown(prompt)
        if refused is not None:
            return refused
        events = []
        for i, (text, token, finish, stop) in enumerate(self._sample(prompt, body)):
            choice: dict[str, Any] = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": stop,
            }
            if self.token_ids and body.get("return_token_ids"):
                choice["token_ids"] = [token]
                if i == 0:
                    choice["prompt_token_ids"] = prompt
            events.append({"id": "cmpl-1", "object": "text_completion", "choices": [choice]})
        events.append({"id": "cmpl-1", "choices": [], "usage": self._usage(prompt, len(events))})
        return Stream(sse(events))

    def chat(self, body: Any) -> Stream:
        prompt = self.tokens(self.render({**body, "add_generation_prompt": True}), False)
        events = []
        for text, _, finish, _ in self._sample(prompt, body):
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
            events.append({"id": "c1", "object": "chat.completion.chunk", "choices": [choice]})
        usage = self._usage(prompt, len(events))
        events.append(
            {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
        return Stream(sse(events))

    def _sample(
        self, prompt: list[int], body: dict[str, Any]
    ) -> list[tuple[str, int, str | None, str | None]]:
        """(text, token id, finish reason, stop reason) per sampled token."""
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        most = int(body.get("max_tokens") or 16)
        stops = list(body.get("stop") or [])
        sampled: list[tuple[str, int, str | None, str | None]] = []
        written = ""
        with self._lock:
            same = 0
            for ours, held in zip(prompt, self._cached, strict=False):
                if ours != held:
                    break
                same += 1
            # Whole blocks, and never the last prompt token (it must be computed).
            self._reused = min(same, len(prompt) - 1) // BLOCK_TOKENS * BLOCK_TOKENS
            llm = self._llm
            if body.get("seed") is not None:
                llm.set_seed(int(body["seed"]))
            top_k = int(body.get("top_k", -1))
            steps = llm.generate(
                prompt,
                temp=float(body.get("temperature", 1.0)),
                top_p=float(body.get("top_p", 1.0)),
                top_k=top_k if top_k > 0 else 0,
                min_p=float(body.get("min_p", 0.0)),
                repeat_penalty=float(body.get("repetition_penalty", 1.0)),
            )
            for token in steps:
                if token == llm.token_eos():
                    sampled.append(("", token, "stop", None))
                    break
                text = decoder.decode(llm.detokenize([token]))
                stop = next((s for s in stops if s in written + text), None)
                if stop is not None:  # the text up to the stop string, which is cut
                    text = (written + text)[: (written + text).index(stop)][len(written) :]
                    sampled.append((text, token, "stop", stop))
                    break
                written += text
                finish = "length" if len(sampled) + 1 >= most else None
                sampled.append((text, token, finish, None))
                if finish:
                    break
        self._cached = prompt + [token for _, token, _, _ in sampled]
        return sampled

    def _usage(self, prompt: list[int], generated: int) -> dict[str, Any]:
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": generated,
            "total_tokens": len(prompt) + generated,
            "prompt_tokens_details": {"cached_tokens": self._reused},
        }
