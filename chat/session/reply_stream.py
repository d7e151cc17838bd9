"""One reply being generated: the engine runs in a background thread, tokens
are batched per frame, and the events go to `deliver`, called from that
thread (the chat screen posts them to itself; `post_message` never blocks, so
the engine never waits for the screen to draw). No Textual here.

Tokens that arrive within one frame (`frame_s`) of the last delivery travel
together: the screen cannot show them apart anyway, and every delivery costs
the UI a Markdown update, which competes with the engine for the CPU. After
the reply's first piece (drawn at once: the time to the first token is what
the user waits for), a piece also waits for a few tokens
(chat.runtime.frame_pacing.delivery_due).

While the prompt is evaluated, the engine's `PromptProgress` events go to
`deliver` as they come (one per batch, not per token).

A reasoning model's reply is split here into its thinking and its answer as
it streams (chat.engine.reasoning.splitter, from the markers the engine
recognised in the model's template; a model server that sends the thinking in
a field of its own marks those tokens `TokenEvent.thinking`): chunks carry the
two apart, and the end carries the answer as the reply's text, the thinking
beside it.

The save cadence lives here too: a chunk is marked `save_due` when the reply's
text was last marked more than `save_interval_s` ago, so that a killed process
loses at most that much of a reply (the text of the whole reply so far is
`ReplyStream.text`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from chat.conversations.saver import SAVE_INTERVAL_S
from chat.conversations.token_probs_codec import StoredTokenChoices
from chat.engine.protocol import ChatMessages, Engine, Finished, PromptProgress, TokenEvent
from chat.engine.reasoning.markers import Reasoning
from chat.engine.reasoning.splitter import (
    ReplyPart,
    ThinkingSplitter,
    inside_thought,
    token_parts,
)
from chat.errors import KvchatError, PromptTooLongError, ServerError
from chat.runtime.background import start_thread
from chat.runtime.frame_pacing import FASTEST_FRAME_S, TOKENS_PER_FRAME, delivery_due
from chat.settings.schema import SamplingSettings

FRAME_S = FASTEST_FRAME_S
"""One frame at 15 frames a second, until `ReplyStream.frame_s` is changed."""


@dataclass(frozen=True)
class ReplyChunk:
    """The tokens sampled since the last chunk: the answer's text (already
    safe to display), how many tokens, and whether the reply so far is due to
    be saved; `thinking`: the thinking's text among them, and
    `thinking_tokens` of the `tokens`."""

    text: str
    tokens: int
    save_due: bool = False
    thinking: str = ""
    thinking_tokens: int = 0


@dataclass(frozen=True)
class ReplyEnded:
    """The reply is complete (or was stopped); `finished` holds all of it: its
    `text` the answer, its stats the thinking's tokens and the time to the
    answer's first token. `thinking`: the thinking's text ("" when none);
    `in_thought`: the reply ended inside its thinking (stopped, or cut by
    max tokens)."""

    finished: Finished
    thinking: str = ""
    in_thought: bool = False


@dataclass(frozen=True)
class ReplyFailed:
    """No reply: `error` says why, in words. `prompt_too_long`: the prompt did
    not fit the window, and nothing was generated. `server_failed`: a model
    server could not be used (down, or answering garbage) before any text came."""

    error: str
    prompt_too_long: bool = False
    server_failed: bool = False


ReplyEvent = ReplyChunk | PromptProgress | ReplyEnded | ReplyFailed


class ReplyStream:
    def __init__(
        self,
        engine: Engine,
        messages: ChatMessages,
        sampling: SamplingSettings,
        deliver: Callable[[ReplyEvent], object],
        *,
        record_probs: bool = False,
        frame_s: float = FRAME_S,
        tokens_per_frame: int = TOKENS_PER_FRAME,
        save_interval_s: float = SAVE_INTERVAL_S,
        before: Callable[[], object] | None = None,
        continue_text: str | None = None,
        reasoning: Reasoning | None = None,
        continue_thinking: str | None = None,
        continue_after_thought: bool = False,
    ) -> None:
        """`before`: run in the reply's thread before the prompt is evaluated
        (putting back a saved KV cache); its failure is ignored.
        `continue_text`: the last message of `messages` is this reply, cut
        short, and the model goes on writing it (chunks carry only new text).
        `reasoning`: how the model thinks (`ModelInfo.reasoning`): its reply is
        split into thinking and answer (a continuation of the answer is all
        answer). `continue_thinking`: the reply continued was cut inside its
        thinking, which this is so far: the continuation starts inside it.
        `continue_after_thought`: the reply continued closed its thinking on
        its last tokens, before any answer: the continuation starts the
        answer (its leading whitespace not shown, as any answer's)."""
        self._before = before
        self._splitter: ThinkingSplitter | None = None
        if reasoning is not None and continue_text is None:
            self._splitter = ThinkingSplitter(reasoning.markers, reasoning.prompt_opens_block)
        elif reasoning is not None and continue_thinking is not None:
            self._splitter = ThinkingSplitter(reasoning.markers, starts_inside=True)
        elif reasoning is not None and continue_after_thought:
            self._splitter = ThinkingSplitter(reasoning.markers, starts_after=True)
        self._thinking: list[str] = [continue_thinking or ""]
        self._thinking_tokens = 0
        self._continue_text = continue_text
        self._engine = engine
        self._messages = list(messages)
        self._sampling = sampling
        self._deliver = deliver
        self._record_probs = record_probs
        self.frame_s = frame_s
        """Deliver tokens this long after the last delivery; may change while
        the reply streams (chat.runtime.frame_pacing)."""
        self._tokens_per_frame = tokens_per_frame
        self._save_interval_s = save_interval_s
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        """The reply's answer so far (every token delivered, or about to be),
        with the text it continues."""
        return (self._continue_text or "") + "".join(self._parts)

    @property
    def thinking(self) -> str:
        """The reply's thinking so far."""
        return "".join(self._thinking)

    @property
    def in_thought(self) -> bool:
        """The reply is inside its thinking now (`inside_thought`)."""
        return inside_thought(self._splitter, self.thinking, any(self._parts))

    def _split(self, event: TokenEvent) -> tuple[str, str, int]:
        """`event`'s text as (answer, thinking, thinking tokens)."""
        return self._parts_of(token_parts(event, self._splitter))

    def _keep(self, answer: str, thought: str, thought_tokens: int) -> None:
        """The whole reply so far (`text`, `thinking`), beside the chunk under way."""
        self._parts.append(answer)
        self._thinking.append(thought)
        self._thinking_tokens += thought_tokens

    def _parts_of(self, parts: list[ReplyPart]) -> tuple[str, str, int]:
        answer = "".join(part.text for part in parts if part.kind == "answer")
        thinking = "".join(part.text for part in parts if part.kind == "thinking")
        tokens = sum(part.tokens for part in parts if part.kind == "thinking")
        return answer, thinking, tokens

    def start(self) -> None:
        self._thread = start_thread("generate", self._run)

    def cancel(self) -> None:
        """End the reply after the current token (or, while the prompt is
        evaluated, after the current batch, with no text); it ends with
        `ReplyEnded` (finish reason "stopped")."""
        self._cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; False if it is still running."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _ended(
        self, finished: Finished, first_token_at: float | None, first_answer_at: float | None
    ) -> ReplyEnded:
        """The end as the session keeps it: the answer as the reply's text, the
        thinking beside it (and its tokens, the time to the answer, in the
        stats). The sampled ids spell the whole reply, thinking included: they
        are kept for a next prompt that keeps the thinking (`sampled_whole`);
        a prompt that sends the answer alone finds they do not spell it."""
        thinking = self.thinking
        if (
            not thinking
            and not self._thinking_tokens
            and (self._splitter is None or not self._splitter.saw_thinking)
        ):
            return ReplyEnded(finished)
        stats = finished.stats
        first_answer_s = None
        if first_answer_at is not None and first_token_at is not None:
            first_answer_s = stats.ttft_s + (first_answer_at - first_token_at)
        stats = replace(stats, thinking_tokens=self._thinking_tokens, first_answer_s=first_answer_s)
        answer = "".join(self._parts)
        kept = replace(finished, text=answer, stats=stats)
        return ReplyEnded(kept, thinking, self.in_thought)

    def _run(self) -> None:
        text, tokens, thinking, thinking_tokens = "", 0, "", 0
        first_token_at: float | None = None
        first_answer_at: float | None = None
        if self._before is not None:
            with contextlib.suppress(Exception):
                self._before()
        delivered_at = saved_at = time.monotonic()
        per_frame = 1  # the first piece goes at once
        ended: ReplyEnded | None = None
        try:
            if self._continue_text is None:
                events = self._engine.stream_reply(
                    self._messages, self._sampling, self._cancel, self._record_probs
                )
            else:
                events = self._engine.stream_reply(
                    self._messages,
                    self._sampling,
                    self._cancel,
                    self._record_probs,
                    continue_last=True,
                )
            for event in events:
                if isinstance(event, TokenEvent):
                    now = time.monotonic()
                    first_token_at = first_token_at or now
                    answer, thought, thought_tokens = self._split(event)
                    if answer and first_answer_at is None:
                        first_answer_at = now
                    text, thinking = text + answer, thinking + thought
                    thinking_tokens += thought_tokens
                    self._keep(answer, thought, thought_tokens)
                    tokens += 1 if event.token_id >= 0 else 0  # -1: held-back text at the end
                    if (text or thinking or tokens) and delivery_due(
                        now - delivered_at, tokens, self.frame_s, per_frame
                    ):
                        save_due = now - saved_at >= self._save_interval_s
                        saved_at = now if save_due else saved_at
                        chunk = ReplyChunk(text, tokens, save_due, thinking, thinking_tokens)
                        self._deliver(chunk)
                        text, tokens, thinking, thinking_tokens = "", 0, "", 0
                        delivered_at = now
                        per_frame = self._tokens_per_frame
                elif isinstance(event, PromptProgress):
                    self._deliver(event)
                elif isinstance(event, Finished):
                    if self._splitter is not None:
                        answer, thought, thought_tokens = self._parts_of(self._splitter.flush())
                        text, thinking = text + answer, thinking + thought
                        thinking_tokens += thought_tokens
                        self._keep(answer, thought, thought_tokens)
                    if text or tokens or thinking:
                        self._deliver(ReplyChunk(text, tokens, False, thinking, thinking_tokens))
                    ended = self._ended(event, first_token_at, first_answer_at)
            # After the loop: the engine's call is over (its lock released), so
            # whoever hears of the end may start the next reply at once.
            if ended is not None:
                self._deliver(_choices_encoded(ended))
        except PromptTooLongError as error:
            self._deliver(ReplyFailed(str(error), prompt_too_long=True))
        except ServerError as error:
            self._deliver(ReplyFailed(str(error), server_failed=True))
        except KvchatError as error:
            self._deliver(ReplyFailed(str(error)))
        except Exception as error:  # a bug or a llama.cpp failure: say so, keep the app alive
            self._deliver(ReplyFailed(f"Generation failed: {error}"))


def _choices_encoded(ended: ReplyEnded) -> ReplyEnded:
    """`ended` with the reply's token probabilities in the form they are
    saved in, made here on the reply's thread once the engine has let go:
    the UI thread saves the reply as it ends, and encoding a 300-token
    reply's choices took it 5-6 ms, a third of the reply's end
    (docs/performance.md, "a reply's token probabilities encoded on its
    thread")."""
    choices = ended.finished.choices
    if not choices or isinstance(choices, StoredTokenChoices):
        return ended
    try:
        encoded = StoredTokenChoices.encoded(choices)
    except Exception:  # never a reply lost for it: the save encodes them, as before
        return ended
    return replace(ended, finished=replace(ended.finished, choices=encoded))
