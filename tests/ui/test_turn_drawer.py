"""Text the turn delivers while the screen has not drawn the last text yet
joins it: a screen that falls behind draws what came meanwhile at once."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from textual.screen import Screen

from chat.conversations.conversation import Message
from chat.engine.protocol import PromptProgress
from chat.session.turn import Turn, TurnEvent, TurnProgress, TurnText
from chat.ui.messages import TurnUpdate
from chat.ui.turn_drawer import TurnDrawer


class PostedScreen:
    """Stands in for the chat screen: keeps what is posted to it."""

    def __init__(self) -> None:
        self.posted: list[TurnUpdate] = []

    def post_message(self, message: TurnUpdate) -> bool:
        self.posted.append(message)
        return True


def drawer_and_screen() -> tuple[TurnDrawer, PostedScreen]:
    screen = PostedScreen()
    drawer = TurnDrawer(cast(Screen[None], screen), cast(Turn, object()))
    return drawer, screen


def events(screen: PostedScreen) -> list[TurnEvent]:
    return [update.event for update in screen.posted]


def test_text_not_drawn_yet_is_joined_by_the_next() -> None:
    drawer, screen = drawer_and_screen()
    reply = Message("assistant", "")
    drawer.listener(TurnText(reply, "Once", 1))
    drawer.listener(TurnText(reply, " upon", 1, thinking="hm", thinking_tokens=1))
    drawer.listener(TurnText(reply, " a time", 2))
    assert events(screen) == [TurnText(reply, "Once upon a time", 4, "hm", 1)]


def test_text_after_the_last_is_drawn_or_after_another_event_is_an_update_of_its_own() -> None:
    drawer, screen = drawer_and_screen()
    reply = Message("assistant", "")
    progress = TurnProgress(reply, PromptProgress(done=1, total=2, elapsed_s=0.1))
    drawer.listener(TurnText(reply, "Once", 1))
    drawer.listener(progress)
    drawer.listener(TurnText(reply, " upon", 1))
    # Drawn (this reply has no view here: nothing is shown), then more text.
    asyncio.run(drawer.draw(screen.posted[-1].event))
    drawer.listener(TurnText(reply, " a time", 2))
    assert events(screen) == [
        TurnText(reply, "Once", 1),
        progress,
        TurnText(reply, " upon", 1),
        TurnText(reply, " a time", 2),
    ]


def test_another_replys_text_is_not_joined() -> None:
    drawer, screen = drawer_and_screen()
    first, second = Message("assistant", ""), Message("assistant", "")
    drawer.listener(TurnText(first, "a", 1))
    drawer.listener(TurnText(second, "b", 1))
    texts: list[Any] = events(screen)
    assert len(texts) == 2
    assert texts[0].reply is first and texts[1].reply is second
