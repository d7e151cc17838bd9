"""Prompt progress in the status bar, on a scripted engine that reads its
prompt in batches: shown while a long prompt is read, Esc stops it at the next
batch with the user's message kept, and Ctrl+L then answers that message."""

from __future__ import annotations

import asyncio

import pytest
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

from chat.session.prompt_progress import SHOW_AFTER_S
from chat.ui.app import ChatApp
from chat.ui.widgets.message_view import AssistantMessageView
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send


def status(app: ChatApp) -> str:
    return str(app.query_one("#status", Static).render())


async def test_progress_shows_while_the_prompt_is_read() -> None:
    engine = ScriptedEngine(replies=[["Sure", "."]], prompt_batches=4, prompt_hold_after=2)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "a long paste")
        await wait_for(engine.holding.is_set, pilot)
        # Two of four batches read: the figures of the second.
        total = len(engine.cached)
        done = total * 2 // 4
        await wait_for(lambda: "Reading prompt" in status(app), pilot)
        assert f"Reading prompt: {done:,} / {total:,} tokens" in status(app)
        assert "tok/s" in status(app) and "left" in status(app) and "Esc stops" in status(app)
        engine.release.set()
        await turn_done(screen, pilot, 2)
        assert "Reading prompt" not in status(app)
        assert screen.conversation.messages[-1].content == "Sure."


async def test_progress_too_wide_for_a_narrow_bar_shows_its_first_phrases() -> None:
    """In a narrow terminal the progress line is wider than the bar (at 80
    columns once its figures are large): it showed "…F1" alone for as long as
    the prompt was read."""
    engine = ScriptedEngine(replies=[["Sure", "."]], prompt_batches=4, prompt_hold_after=2)
    app = make_app(engine)
    async with app.run_test(size=(60, 20)) as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "a long paste " * 300)
        await wait_for(engine.holding.is_set, pilot)
        await wait_for(lambda: "Reading prompt" in status(app), pilot)
        shown = status(app)
        assert shown.startswith("Reading prompt: ") and "tokens" in shown and "tok/s" in shown
        assert shown.endswith("…F1") and len(shown) <= 58
        engine.release.set()
        await turn_done(screen, pilot, 2)


async def test_a_quick_prompt_shows_no_progress() -> None:
    engine = ScriptedEngine(replies=[["Hi"]], prompt_batches=1)
    app = make_app(engine)
    seen: list[str] = []
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        bar = app.query_one("#status", Static)
        bar.watch(bar, "renderable", lambda: seen.append(status(app)), init=False)
        await send(pilot, "hi")
        await turn_done(screen, pilot, 2)
        # A timer set now fires after any the bar set for progress, which would
        # have drawn it by then.
        past = asyncio.Event()
        bar.set_timer(SHOW_AFTER_S, past.set)
        await wait_for(past.is_set, pilot)
        await pilot.pause()
    assert not any("Reading prompt" in text for text in seen)


async def test_escape_while_reading_keeps_the_message_and_ctrl_l_answers_it() -> None:
    engine = ScriptedEngine(replies=[["Answer", "."]], prompt_batches=3, prompt_hold_after=1)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "a long paste")
        await wait_for(engine.holding.is_set, pilot)
        await pilot.press("escape")
        await wait_for(lambda: not screen.generating, pilot)
        # No reply, none saved; the question is kept, on screen and saved.
        [question] = screen.conversation.messages
        assert question.role == "user" and question.id is not None
        assert not app.query(AssistantMessageView)
        assert "stopped while reading the prompt" in status(app)
        store = screen.saver.store
        assert store is not None and screen.conversation.id is not None
        saved = store.get_conversation(screen.conversation.id)
        assert [m.role for m in saved.messages] == ["user"]
        # Ctrl+L answers it: one reply, to the same messages.
        engine.prompt_hold_after = None
        await pilot.press("ctrl+l")
        await turn_done(screen, pilot, 2)
        assert screen.conversation.messages[-1].content == "Answer."
        assert engine.calls[1][0] == engine.calls[0][0]
        assert engine.continued == [False, False]


async def test_the_bars_draw_progress_without_laying_out_the_screen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The status bar and the meter are a row each whatever their text: a
    change of text asks for no layout (each would arrange the whole screen)."""
    from chat.ui.widgets.context_meter import ContextMeter
    from chat.ui.widgets.status_bar import StatusBar

    asked: list[str] = []
    refresh = Widget.refresh

    def spy(self: Widget, *regions: Region, layout: bool = False, **kwargs: bool) -> Widget:
        if layout and isinstance(self, (StatusBar, ContextMeter)):
            asked.append(type(self).__name__)
        return refresh(self, *regions, layout=layout, **kwargs)

    engine = ScriptedEngine(replies=[["Sure", "."]], prompt_batches=4, prompt_hold_after=2)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        monkeypatch.setattr(Widget, "refresh", spy)
        await send(pilot, "a long paste")
        await wait_for(lambda: "Reading prompt" in status(app), pilot)
        engine.release.set()
        await turn_done(screen, pilot, 2)
    assert asked == []
