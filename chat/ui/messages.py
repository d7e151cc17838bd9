"""Messages that cross from worker threads to the UI, declared in one place.

Threads post these with `post_message`, which is thread-safe and does not
block: the engine never waits for the screen to draw.
"""

from __future__ import annotations

from textual.message import Message

from chat.config import ModelSettings
from chat.engine.base import Engine, Finished
from chat.models import ModelCandidate


class ModelLoaded(Message):
    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine


class ModelLoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ReplyToken(Message):
    """One sampled token: its text (already sanitized; "" mid-character)."""

    def __init__(self, text: str, tokens: int = 1) -> None:
        super().__init__()
        self.text = text
        self.tokens = tokens


class ReplyFinished(Message):
    def __init__(self, finished: Finished) -> None:
        super().__init__()
        self.finished = finished


class ReplyFailed(Message):
    def __init__(self, error: str, prompt_too_long: bool = False) -> None:
        super().__init__()
        self.error = error
        self.prompt_too_long = prompt_too_long


class ModelReloaded(Message):
    """A model loaded to replace the running one (settings changed)."""

    def __init__(
        self, engine: Engine, model: ModelCandidate, settings: ModelSettings, save: bool
    ) -> None:
        super().__init__()
        self.engine = engine
        self.model = model
        self.settings = settings
        self.save = save


class ModelReloadFailed(Message):
    """Loading a replacement model failed; the running one stays."""

    def __init__(self, error: str, save: bool) -> None:
        super().__init__()
        self.error = error
        self.save = save
