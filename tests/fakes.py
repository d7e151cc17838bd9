"""A scripted engine: fast, deterministic replies for UI tests.

Every feature that touches the model also has a test with the real demo model;
this only stands in where the UI itself is under test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from chat.conversations.conversation import FinishReason, ReplyStats, TokenChoice
from chat.engine.kv_state import KvState, StateIdentity, common_prefix
from chat.engine.protocol import (
    ChatMessages,
    EngineEvent,
    Finished,
    ModelInfo,
    PromptProgress,
    TokenEvent,
)
from chat.engine.reply_text import ReplyText
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import EngineBusyError, PromptTooLongError
from chat.settings.schema import ModelSettings, SamplingSettings


def scripted_choice(text: str, index: int) -> TokenChoice:
    """A made-up but consistent distribution for the chunk `text`, the index-th
    token of a reply: every third token (0, 3, 6, ...) was sampled outside the
    greedy choice with probability 0.25; the others had 0.5 + index / 100."""
    if index % 3 == 0:
        prob, raw = 0.25, 0.125
        top = [("other", 0.5), (text, prob), ("else", 0.25)]
        raw_top = [("other", 0.5), ("else", 0.25), (text, raw), ("x", 0.0625)]
    else:
        prob, raw = 0.5 + index / 100, 0.25 + index / 200
        top = [(text, prob), ("alt", 1 - prob)]
        raw_top = [(text, raw), ("alt", 0.5 - index / 200), ("z", 0.125)]
    return TokenChoice(index + 1000, text, prob, raw, top, raw_top, greedy=index % 3 != 0)


IDENTITY = StateIdentity(
    model_size=10,
    model_hash="ab" * 32,
    n_ctx=2048,
    type_k=8,
    type_v=1,
    gpu_layers=0,
    flash_attn=False,
    offload_kqv=True,
    swa_full=True,
    library="0.3.36",
    gpu_build=False,
)
"""A state identity for tests that need one (no model file behind it)."""


class ScriptedEngine:
    """Replies with `replies` in turn, one chunk per token.

    `delay` simulates the model's speed: the seconds each token takes to
    generate (a slow model, not a wait for anything). With `hold_after`, each
    reply stalls after that many tokens, as a model might mid-reply, until the
    test sets `release` (or the reply is stopped); `holding` is set while it
    stalls. Both events are cleared when a reply starts, and `hold_after` may be
    set between replies. With `record_probs`, each token carries
    `scripted_choice(chunk, index)`. `on_reply` is called as each reply starts,
    `on_token` with each token's text, both in the reply's thread.

    With `prompt_batches`, the prompt is "read" in that many batches first,
    each followed by a `PromptProgress`; with `prompt_hold_after` too, reading
    stalls after that many batches until `release` (a stop ends it there, with
    no tokens). Each call's `continue_last` is recorded in `continued`.

    Its "KV cache" is the last prompt sent: `save_state` returns those tokens
    (with made-up state bytes), `restore_state` puts a state's tokens back and
    records the state in `restored`.
    """

    def __init__(
        self,
        replies: Sequence[Sequence[str]] = (("Hello", " there", "!"),),
        delay: float = 0.0,
        n_ctx: int = 4096,
        hold_after: int | None = None,
        on_reply: Callable[[], object] | None = None,
        on_token: Callable[[str], object] | None = None,
        prompt_batches: int = 0,
        prompt_hold_after: int | None = None,
    ) -> None:
        self.replies = [list(r) for r in replies]
        self.prompt_batches = prompt_batches
        self.prompt_hold_after = prompt_hold_after
        self.continued: list[bool] = []
        self.delay = delay
        self.hold_after = hold_after
        self.on_reply = on_reply
        self.on_token = on_token
        self.holding = threading.Event()
        self.release = threading.Event()
        self.calls: list[tuple[list[dict[str, str]], SamplingSettings]] = []
        self.prefills: list[list[dict[str, str]]] = []
        self.prefill_exact: list[bool] = []
        self.prefill_tools: list[list[str]] = []
        """The names of the tools each message prefill rendered."""
        """`exact` of each message prefill."""
        self.rebatches = 0
        """Calls of `rebatch_reply` (after a repeatable reply)."""
        self.history_prefills: list[list[dict[str, str]]] = []
        self.started = threading.Event()
        self.cached: tuple[int, ...] = ()
        self.restored: list[KvState] = []
        self.thinking = True
        """What the session last asked of `set_thinking`."""
        self._lock = threading.Lock()
        self.info = ModelInfo(
            path=Path("/models/scripted.gguf"),
            name="scripted",
            n_ctx=n_ctx,
            n_ctx_train=n_ctx,
            n_layers=4,
            gpu_layers=0,
            gpu_supported=False,
        )

    def set_thinking(self, enabled: bool) -> None:
        self.thinking = enabled

    def tokenize_chat(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        words = sum((len(m["content"].split()) + 4 for m in messages), 0)
        return list(range(words + (3 if add_generation_prompt else 0)))

    def stream_reply(
        self,
        messages: ChatMessages,
        sampling: SamplingSettings,
        cancel: threading.Event,
        record_probs: bool = False,
        continue_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> Iterator[EngineEvent]:
        if not self._lock.acquire(blocking=False):
            raise EngineBusyError("busy")
        try:
            prompt = self.tokenize_chat(messages)
            if len(prompt) >= self.info.n_ctx:
                raise PromptTooLongError(
                    f"The prompt is {len(prompt)} tokens; the window holds {self.info.n_ctx}."
                )
            self.calls.append(([dict(m) for m in messages], sampling))
            self.continued.append(continue_last)
            self.cached = tuple(prompt)
            if self.on_reply is not None:
                self.on_reply()
            script = self.replies[(len(self.calls) - 1) % len(self.replies)]
            reply = ReplyText()
            self.holding.clear()
            self.release.clear()
            self.started.set()
            finish: FinishReason = "done"
            generated = 0
            choices: list[TokenChoice] = []
            if self.prompt_batches:
                read = yield from self._read_prompt(len(prompt), cancel)
                if not read:
                    stats = ReplyStats(len(prompt), 0, 0, 0.01, 0.0, "stopped", seed=1234)
                    yield Finished("", stats, (), ())
                    return
            for chunk in script:
                if generated == self.hold_after:
                    self._stall(cancel)
                if self.delay:
                    time.sleep(self.delay)  # the simulated time to generate this token
                choice = scripted_choice(chunk, generated) if record_probs else None
                if choice is not None:
                    choices.append(choice)
                generated += 1
                text = reply.feed(chunk.encode())
                if self.on_token is not None and text:
                    self.on_token(text)
                yield TokenEvent(text, generated, choice)
                if cancel.is_set():
                    finish = "stopped"
                    break
            reply.flush()
            stats = ReplyStats(
                prompt_tokens=len(prompt),
                prompt_evaluated=len(prompt),
                generated_tokens=generated,
                ttft_s=0.01,
                decode_tps=100.0,
                finish_reason=finish,
                seed=sampling.seed if sampling.seed is not None else 1234,
            )
            yield Finished(reply.text, stats, tuple(choices))
        finally:
            self._lock.release()

    def _stall(self, cancel: threading.Event) -> None:
        """Hold (`holding` set) until released; a stop still ends it within a token."""
        self.holding.set()
        while not self.release.wait(0.01) and not cancel.is_set():
            pass
        self.holding.clear()

    def _read_prompt(
        self, total: int, cancel: threading.Event
    ) -> Generator[PromptProgress, None, bool]:
        yield PromptProgress(0, total, 0.0)
        for batch in range(1, self.prompt_batches + 1):
            if batch - 1 == self.prompt_hold_after:
                self._stall(cancel)
            if cancel.is_set():
                return False
            time.sleep(self.delay)
            done = total * batch // self.prompt_batches
            yield PromptProgress(done, total, batch * 0.5)
        return True

    def prefill(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        exact: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> bool:
        """Records message prefills in `prefills`, conversation ones in `history_prefills`."""
        if add_generation_prompt:
            self.prefill_exact.append(exact)
            self.prefill_tools.append([tool.name for tool in tools])
        done = self.prefills if add_generation_prompt else self.history_prefills
        done.append([dict(m) for m in messages])
        return True

    def rebatch_reply(self) -> bool:
        self.rebatches += 1
        return True

    def state_identity(self) -> StateIdentity:
        return replace(IDENTITY, model_hash="scripted", n_ctx=self.info.n_ctx, library="scripted")

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        return common_prefix(self.cached, tokens)

    def save_state(self, timeout: float = 1.0) -> KvState | None:
        if not self.cached:
            return None
        return KvState(self.cached, b"scripted state " * 4)

    def restore_state(self, state: KvState) -> bool:
        self.cached = state.tokens
        self.restored.append(state)
        return True

    def reset(self) -> None:
        self.cached = ()

    def close(self) -> None:
        pass


def scripted_factory(engine: ScriptedEngine):  # type: ignore[no-untyped-def]
    def factory(path: Path, settings: ModelSettings) -> ScriptedEngine:
        return engine

    return factory
