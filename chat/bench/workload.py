"""What the measures share: the prompt and sampling every run uses, the token
stream of a bare llama-cpp-python client (the baseline kvchat is held to), and
how the app is started and waited on headless."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, cast

from chat.engine.llama import LlamaEngine, load_engine
from chat.engine.protocol import Engine, EngineEvent, Finished, TokenEvent
from chat.models.files import ModelCandidate
from chat.settings.schema import ModelSettings, SamplingSettings, Settings
from chat.ui.app import ChatApp, Launch

STORY = "Write a long story about a lighthouse keeper and the sea. Use many details."
SAMPLING = SamplingSettings(temperature=0.8, seed=1234)


def quiet_load(path: Path, settings: ModelSettings, log: Path) -> LlamaEngine:
    with contextlib.redirect_stderr(io.StringIO()):
        return load_engine(path, settings, log)


def bare_generate(llm: Any, prompt: list[int]) -> Generator[int, Any, None]:
    """The token stream of a minimal llama-cpp-python client, same sampling."""
    llm.set_seed(SAMPLING.seed)
    return llm.generate(
        prompt,
        temp=SAMPLING.temperature,
        top_k=SAMPLING.top_k,
        top_p=SAMPLING.top_p,
        min_p=SAMPLING.min_p,
    )


@contextlib.contextmanager
def busy_core() -> Iterator[None]:
    """Another program keeping a core busy meanwhile (a build, a second model)."""
    program = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # running before anything is timed
        yield
    finally:
        program.kill()
        program.wait()


def first_token_reply(
    engine: Engine, messages: list[dict[str, str]], sampling: SamplingSettings = SAMPLING
) -> Finished:
    """The reply to `messages` stopped right after its first token (Esc as
    soon as it shows): its stats carry the time to first token. Setting the
    cancel event before the call would stop it before the prompt is read."""
    cancel = threading.Event()

    def stop_at_first_token() -> Iterator[EngineEvent]:
        for event in engine.stream_reply(messages, sampling, cancel):
            if isinstance(event, TokenEvent) and event.token_id >= 0:
                cancel.set()
            yield event

    return finished(stop_at_first_token())


def finished(events: Iterator[EngineEvent]) -> Finished:
    """The `Finished` event that ends a reply, once the reply has run."""
    last = None
    for event in events:
        if isinstance(event, Finished):
            last = event
    assert last is not None
    return last


def headless_app(engine: LlamaEngine, settings: Settings) -> ChatApp:
    """The app as `chat` builds it, with `engine` (its KV cache emptied) as the model."""
    engine.reset()
    lent = cast(Engine, _Lent(engine))
    return ChatApp(
        Launch(settings, ModelCandidate(engine.info.path, 0, "bench")),
        engine_factory=lambda p, s: lent,
    )


class _Lent:
    """The benchmark's engine as lent to one app: the app frees its model when
    it quits, but this one goes on to the next measure, so closing is a no-op."""

    def __init__(self, engine: LlamaEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        pass


async def until(condition: Callable[[], bool], timeout: float = 120) -> None:
    """Wait, without adding work to the app: `Pilot.pause` posts a message to
    every widget each time, which costs the UI thread (and so the engine, which
    shares the GIL) more than the app itself does while a reply streams."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        await asyncio.sleep(0.02)
