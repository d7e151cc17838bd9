"""One reply being generated: the engine runs in a background thread, tokens
are batched per frame, and the events go to `deliver`, called from that
thread (the chat screen posts them to itself; `post_message` never blocks, so
the engine never waits for the screen to draw). No Textual here.

Tokens that arrive within one frame (`frame_s`) of the last delivery travel
together: the screen cannot show them apart anyway, and every delivery costs
the UI a Markdown update, which competes with the engine for the CPU.

While the prompt is evaluated, the engine's `PromptProgress` events go to
`deliver` as they come (one per batch, not per token).

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
from dataclasses import dataclass

from chat.conversations.saver import SAVE_INTERVAL_S
from chat.engine.base import ChatMessages, Engine, Finished, PromptProgress, TokenEvent
from chat.errors import KvchatError, PromptTooLongError, ServerError
from chat.session.background import start_thread
from chat.session.frame_pacing import FASTEST_FRAME_S
from chat.settings.schema import SamplingSettings

FRAME_S = FASTEST_FRAME_S
"""One frame at 30 frames a second, until `ReplyStream.frame_s` is changed."""


@dataclass(frozen=True)
class ReplyChunk:
    """The tokens sampled since the last chunk: their text (already safe to
    display), how many tokens, and whether the reply so far is due to be saved."""

    text: str
    tokens: int
    save_due: bool = False


@dataclass(frozen=True)
class ReplyEnded:
    """The reply is complete (or was stopped); `finished` holds all of it."""

    finished: Finished


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
        save_interval_s: float = SAVE_INTERVAL_S,
        before: Callable[[], object] | None = None,
        continue_text: str | None = None,
    ) -> None:
        """`before`: run in the reply's thread before the prompt is evaluated
        (putting back a saved KV cache); its failure is ignored.
        `continue_text`: the last message of `messages` is this reply, cut
        short, and the model goes on writing it (chunks carry only new text)."""
        self._before = before
        self._continue_text = continue_text
        self._engine = engine
        self._messages = list(messages)
        self._sampling = sampling
        self._deliver = deliver
        self._record_probs = record_probs
        self.frame_s = frame_s
        """Deliver tokens this long after the last delivery; may change while
        the reply streams (chat.session.frame_pacing)."""
        self._save_interval_s = save_interval_s
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        """The reply so far (every token delivered, or about to be), with the
        text it continues."""
        return (self._continue_text or "") + "".join(self._parts)

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

    def _run(self) -> None:
        text, tokens = "", 0
        if self._before is not None:
            with contextlib.suppress(Exception):
                self._before()
        delivered_at = saved_at = time.monotonic()
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
                    text += event.text
                    self._parts.append(event.text)
                    tokens += 1 if event.token_id >= 0 else 0  # -1: held-back text at the end
                    now = time.monotonic()
                    if (text or tokens) and now - delivered_at >= self.frame_s:
                        save_due = now - saved_at >= self._save_interval_s
                        saved_at = now if save_due else saved_at
                        self._deliver(ReplyChunk(text, tokens, save_due))
                        text, tokens, delivered_at = "", 0, now
                elif isinstance(event, PromptProgress):
                    self._deliver(event)
                elif isinstance(event, Finished):
                    if text or tokens:
                        self._deliver(ReplyChunk(text, tokens))
                    self._deliver(ReplyEnded(event))
        except PromptTooLongError as error:
            self._deliver(ReplyFailed(str(error), prompt_too_long=True))
        except ServerError as error:
            self._deliver(ReplyFailed(str(error), server_failed=True))
        except KvchatError as error:
            self._deliver(ReplyFailed(str(error)))
        except Exception as error:  # a bug or a llama.cpp failure: say so, keep the app alive
            self._deliver(ReplyFailed(f"Generation failed: {error}"))
