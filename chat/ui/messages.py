"""Textual messages of the app, declared in one place.

Background threads (chat.runtime.background) post these with `post_message`,
which is thread-safe and never blocks: the engine never waits for the screen
to draw. Each carries a Textual-free event from chat.session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from chat.runtime.model_loader import LoadOutcome
from chat.session.turn import TurnEvent


@dataclass
class ModelLoadFinished(Message):
    """A model load (at start or a reload) ended: the model is ready, or why not."""

    outcome: LoadOutcome


@dataclass
class TurnUpdate(Message, bubble=False):
    """The turn moved on (chat.session.turn): a reply started, its text, its
    end or failure, a message waiting for the model. Only the chat screen
    draws it: it does not go on to the app (many a second while a reply streams)."""

    event: TurnEvent


@dataclass
class SwitchModelRequested(Message):
    """The user chose to continue a conversation on the model it was made with."""

    path: Path


@dataclass
class SwitchServerRequested(Message):
    """The user chose to continue a conversation on the model server it was
    made with (`kind`: its recorded kind; `model`: the served model's name)."""

    url: str
    kind: str
    model: str | None
