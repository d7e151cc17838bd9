"""The token view (Ctrl+T): driven like a user would with Pilot on a scripted
engine, and with the real demo model."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from textual.widgets import Static

from chat.conversations.conversation import Conversation, Message, TokenChoice
from chat.conversations.store import Store
from chat.conversations.token_probs_codec import StoredTokenChoices
from chat.models.files import ModelCandidate
from chat.settings.schema import SamplingSettings, Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.chat import ChatScreen
from chat.ui.screens.token_view import NO_PROBS, TokenViewScreen
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.token_strip import (
    ProbabilityBars,
    TokenStrip,
    format_prob,
    layout_tokens,
    visible_whitespace,
)
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine, scripted_choice
from tests.ui.conftest import make_app, ready, run_command, send

CHUNKS = ["Hello", " there", "!", "\n\n", "How", " can", " I", " help", "?"]


def text_of(widget: Static) -> str:
    return str(widget.render())


def detail(app: ChatApp) -> tuple[str, str, str, str]:
    screen = app.screen
    return (
        text_of(screen.query_one("#token-title", Static)),
        text_of(screen.query_one("#token-probability", Static)),
        str(screen.query_one("#sampled-bars", ProbabilityBars).render()),
        str(screen.query_one("#raw-bars", ProbabilityBars).render()),
    )


def assert_detail_shows(app: ChatApp, choice: TokenChoice, index: int, count: int) -> None:
    title, probability, sampled, raw = detail(app)
    assert f"Token {index + 1} of {count}" in title
    assert f"“{visible_whitespace(choice.text)}”" in title
    assert f"Probability {format_prob(choice.prob)} after your sampling settings" in probability
    assert f"{format_prob(choice.raw_prob)} in the raw model distribution" in probability
    for entries, shown in ((choice.top, sampled), (choice.raw_top, raw)):
        for text, prob in entries:
            assert visible_whitespace(text) in shown
            assert format_prob(prob) in shown
    assert ("outside the greedy choice" in title) == (not choice.greedy)


async def chat_once(app: ChatApp, pilot) -> ChatScreen:  # type: ignore[no-untyped-def]
    screen = await ready(app, pilot)
    before = len(screen.conversation.messages)
    await send(pilot, "hi")
    await turn_done(screen, pilot, before + 2)
    return screen


async def open_view(app: ChatApp, pilot) -> TokenViewScreen:  # type: ignore[no-untyped-def]
    await pilot.press("ctrl+t")
    await wait_for(lambda: isinstance(app.screen, TokenViewScreen), pilot)
    await pilot.pause()
    assert isinstance(app.screen, TokenViewScreen)
    return app.screen


# -- scripted engine: navigation, mouse, edge cases ---------------------------------


async def test_ctrl_t_shows_the_last_reply_token_by_token_and_arrows_move() -> None:
    app = make_app(ScriptedEngine(replies=[CHUNKS]))
    async with app.run_test(size=(100, 36)) as pilot:
        screen = await chat_once(app, pilot)
        reply = screen.conversation.messages[-1]
        assert reply.token_probs is not None and len(reply.token_probs) == len(CHUNKS)
        view = await open_view(app, pilot)
        strip = view.query_one(TokenStrip)
        assert strip.texts == CHUNKS and "".join(strip.texts) == reply.content
        # the strip shows the text with newlines marked, one line per text line
        shown = [strip.line_text(y) for y in range(len(strip.lines))]
        assert shown == ["Hello there!⏎", "⏎", "How can I help?"]
        summary = text_of(view.query_one("#token-summary", Static))
        choices = list(reply.token_probs)
        mean = sum(c.prob for c in choices) / len(choices)
        assert f"mean probability {format_prob(mean)}" in summary
        assert "least likely chosen: “Hello” 25.0% (token 1;" in summary
        assert "3 sampled outside the greedy choice" in summary

        assert_detail_shows(app, choices[0], 0, len(choices))
        await pilot.press("right")
        assert strip.cursor == 1
        assert_detail_shows(app, choices[1], 1, len(choices))
        await pilot.press("right", "right", "right")
        assert_detail_shows(app, choices[4], 4, len(choices))
        await pilot.press("left")
        assert_detail_shows(app, choices[3], 3, len(choices))
        assert "“⏎⏎”" in detail(app)[0]  # whitespace made visible
        await pilot.press("end")
        assert strip.cursor == len(CHUNKS) - 1
        assert_detail_shows(app, choices[-1], len(choices) - 1, len(choices))
        await pilot.press("right")  # stays on the last token
        assert strip.cursor == len(CHUNKS) - 1
        await pilot.press("up")  # the line above: "⏎"
        assert strip.cursor == 3
        await pilot.press("up")
        assert strip.cursor == 0  # column 0 of "Hello there!⏎"
        await pilot.press("home")
        assert strip.cursor == 0
        await pilot.press("ctrl+t")  # toggles the view off
        await pilot.pause()
        assert app.screen is screen
        await open_view(app, pilot)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen


async def test_hover_shows_a_token_and_click_moves_the_cursor() -> None:
    app = make_app(ScriptedEngine(replies=[CHUNKS]))
    async with app.run_test(size=(100, 36)) as pilot:
        screen = await chat_once(app, pilot)
        choices = list(screen.conversation.messages[-1].token_probs or [])
        view = await open_view(app, pilot)
        strip = view.query_one(TokenStrip)
        piece = next(p for p in strip.lines[2] if p.token == 7)  # " help"
        await pilot.hover(strip, offset=(piece.x + 1, 2))
        await pilot.pause()
        assert strip.hover == 7 and strip.cursor == 0
        assert_detail_shows(app, choices[7], 7, len(choices))
        # leaving the strip shows the cursor's token again
        await pilot.hover("#token-summary")
        await pilot.pause()
        assert strip.hover is None
        assert_detail_shows(app, choices[0], 0, len(choices))
        await pilot.click(strip, offset=(piece.x + 1, 2))
        await pilot.pause()
        assert strip.cursor == 7
        assert_detail_shows(app, choices[7], 7, len(choices))
        await pilot.press("left")
        assert_detail_shows(app, choices[6], 6, len(choices))
        # the keys win over the mouse resting on a token
        await pilot.hover(strip, offset=(piece.x + 1, 2))
        await pilot.pause()
        assert_detail_shows(app, choices[7], 7, len(choices))
        await pilot.press("left")
        assert strip.hover is None
        assert_detail_shows(app, choices[5], 5, len(choices))


async def test_clicked_reply_is_the_one_shown_and_p_n_switch_replies() -> None:
    engine = ScriptedEngine(replies=[["First", " reply"], ["Second", " one", "."]])
    app = make_app(engine)
    async with app.run_test(size=(100, 36)) as pilot:
        await chat_once(app, pilot)
        await chat_once(app, pilot)
        views = list(app.query(AssistantMessageView))
        await pilot.click(views[0].body)
        await pilot.pause()
        assert views[0].has_class("selected") and not views[1].has_class("selected")
        view = await open_view(app, pilot)
        assert view.query_one(TokenStrip).texts == ["First", " reply"]
        assert "reply 1 of 2" in str(view.query_one("#token-dialog").border_title)
        await pilot.press("n")
        await pilot.pause()
        assert view.query_one(TokenStrip).texts == ["Second", " one", "."]
        assert_detail_shows(app, scripted_choice("Second", 0), 0, 3)
        await pilot.press("n")  # no newer reply: stays
        await pilot.pause()
        assert view.query_one(TokenStrip).texts == ["Second", " one", "."]
        await pilot.press("p")
        await pilot.pause()
        assert view.query_one(TokenStrip).texts == ["First", " reply"]
        await pilot.press("escape")
        await pilot.pause()
        # the selection is used once: next time Ctrl+T opens the newest reply
        assert not views[0].has_class("selected")
        view = await open_view(app, pilot)
        assert view.query_one(TokenStrip).texts == ["Second", " one", "."]


async def test_u_jumps_to_the_least_likely_token() -> None:
    app = make_app(ScriptedEngine(replies=[["a", "b", "c", "d", "e"]]))
    async with app.run_test(size=(100, 36)) as pilot:
        await chat_once(app, pilot)
        view = await open_view(app, pilot)
        await pilot.press("end", "u")
        assert view.query_one(TokenStrip).cursor == 0  # ties: the first one


async def test_reply_without_probabilities_says_so() -> None:
    settings = Settings()
    settings.chat.record_token_probs = False
    app = make_app(ScriptedEngine(replies=[CHUNKS]), settings)
    async with app.run_test(size=(100, 36)) as pilot:
        screen = await chat_once(app, pilot)
        assert screen.conversation.messages[-1].token_probs is None
        view = await open_view(app, pilot)
        assert not view.query(TokenStrip)
        problem = text_of(view.query_one("#token-problem", Static))
        assert problem == NO_PROBS and "chat.record_token_probs" in problem
        await pilot.press("escape")


async def test_no_reply_yet_and_the_command_palette_entry() -> None:
    app = make_app(ScriptedEngine(replies=[CHUNKS]))
    async with app.run_test(size=(100, 36)) as pilot:
        screen = await ready(app, pilot)
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert app.screen is screen
        assert any("no reply yet" in n.message for n in app.notices)
        await chat_once(app, pilot)
        await run_command(pilot, "token view", "Token view")
        await wait_for(lambda: isinstance(app.screen, TokenViewScreen), pilot)
        await pilot.pause()
        assert app.screen.query_one(TokenStrip).texts == CHUNKS


async def test_token_texts_are_shown_literally() -> None:
    hostile = ["[bold]x[/bold]", " [@click=app.quit]q[/]", " ", "\t", "end"]
    app = make_app(ScriptedEngine(replies=[hostile]))
    async with app.run_test(size=(100, 36)) as pilot:
        await chat_once(app, pilot)
        view = await open_view(app, pilot)
        strip = view.query_one(TokenStrip)
        assert strip.line_text(0) == "[bold]x[/bold] [@click=app.quit]q[/] ⇥end"
        assert "“[bold]x[/bold]”" in detail(app)[0]
        await pilot.press("right")
        assert "“␣[@click=app.quit]q[/]”" in detail(app)[0]
        await pilot.press("right")
        assert "“␣”" in detail(app)[0]
        await pilot.press("right")
        assert "“⇥”" in detail(app)[0]
        await pilot.click(strip, offset=(3, 0))
        await pilot.pause()
        assert app.is_running


def test_layout_wraps_at_token_boundaries_and_splits_long_tokens() -> None:
    lines = layout_tokens(["aaaa", " bbb", " cc", "\n", "d" * 12], width=10)
    texts = ["".join(p.text for p in line) for line in lines]
    assert texts == ["aaaa bbb", " cc⏎", "dddddddddd", "dd"]
    assert [p.token for p in lines[2] + lines[3]] == [4, 4]
    assert layout_tokens([""], 10)[0][0].text == "∅"
    wide = layout_tokens(["你好你好你好"], 5)
    assert ["".join(p.text for p in line) for line in wide] == ["你好", "你好", "你好"]


def test_format_prob() -> None:
    assert format_prob(1.0) == "100.0%"
    assert format_prob(0.6123) == "61.2%"
    assert format_prob(0.0042) == "0.42%"
    assert format_prob(0.00001) == "<0.01%"
    assert format_prob(0.0) == "0%"


# -- stored with the conversation -----------------------------------------------------


async def test_token_view_of_a_reloaded_conversation(tmp_path: Path) -> None:
    choices = [scripted_choice(text, i) for i, text in enumerate(CHUNKS)]
    reply = Message("assistant", "".join(CHUNKS), token_probs=choices)
    conv = Conversation(messages=[Message("user", "hi"), reply])
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(conv)
        loaded = store.get_conversation(conv_id)
    stored = loaded.messages[1].token_probs
    assert isinstance(stored, StoredTokenChoices) and not stored.decoded
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 36)) as pilot:
        await ready(app, pilot)
        await app.push_screen(TokenViewScreen([loaded.messages[1]], 0))
        await pilot.pause()
        assert app.screen.query_one(TokenStrip).texts == CHUNKS
        assert_detail_shows(app, choices[0], 0, len(choices))
        await pilot.press("right")
        assert_detail_shows(app, choices[1], 1, len(choices))


async def test_damaged_stored_probabilities_are_reported(tmp_path: Path) -> None:
    reply = Message("assistant", "x", token_probs=[scripted_choice("x", 0)])
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(Conversation(messages=[reply]))
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE messages SET token_probs = x'00ff'")
    with Store(tmp_path / "c.db") as store:
        loaded = store.get_conversation(conv_id).messages[0]
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 36)) as pilot:
        await ready(app, pilot)
        await app.push_screen(TokenViewScreen([loaded], 0))
        await pilot.pause()
        problem = text_of(app.screen.query_one("#token-problem", Static))
        assert "cannot be read" in problem


# -- the real model -------------------------------------------------------------------


def real_app(demo_model: Path, settings: Settings) -> ChatApp:
    return ChatApp(Launch(settings, ModelCandidate(demo_model, demo_model.stat().st_size, "demo")))


async def real_chat(app: ChatApp, pilot, text: str) -> Message:  # type: ignore[no-untyped-def]
    screen = app.chat_screen
    await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
    await send(pilot, text)
    await turn_done(screen, pilot, 2, timeout=120)
    return screen.conversation.messages[-1]


@pytest.mark.model
async def test_real_model_token_view(demo_model: Path, tmp_path: Path) -> None:
    settings = Settings()
    settings.sampling = SamplingSettings(temperature=0.9, max_tokens=40, seed=4)
    app = real_app(demo_model, settings)
    async with app.run_test(size=(110, 40)) as pilot:
        reply = await real_chat(app, pilot, "Name three colours.")
        assert reply.stats is not None and reply.token_probs is not None
        choices = list(reply.token_probs)
        assert len(choices) == reply.stats.generated_tokens
        view = await open_view(app, pilot)
        strip = view.query_one(TokenStrip)
        assert "".join(strip.texts) == reply.content
        assert strip.texts == [c.text for c in choices]
        assert_detail_shows(app, choices[0], 0, len(choices))
        await pilot.press("right")
        assert_detail_shows(app, choices[1], 1, len(choices))
        await pilot.press("escape")
        await pilot.pause()

        # Saved and reloaded: the view works the same on the stored reply.
        with Store(tmp_path / "c.db") as store:
            conv_id = store.create_conversation(app.chat_screen.conversation)
            loaded = store.get_conversation(conv_id).messages[-1]
        assert loaded.token_probs == choices
        await app.push_screen(TokenViewScreen([loaded], 0))
        await pilot.pause()
        assert "".join(app.screen.query_one(TokenStrip).texts) == reply.content
        await pilot.press("end")
        assert_detail_shows(app, choices[-1], len(choices) - 1, len(choices))
        await pilot.press("ctrl+q")


@pytest.mark.model
async def test_real_model_temperature_zero_every_token_is_the_top_choice(
    demo_model: Path,
) -> None:
    settings = Settings()
    settings.sampling = SamplingSettings(temperature=0.0, max_tokens=30)
    app = real_app(demo_model, settings)
    async with app.run_test(size=(110, 40)) as pilot:
        reply = await real_chat(app, pilot, "Say hello.")
        choices = list(reply.token_probs or [])
        assert choices and all(c.greedy and c.prob == 1.0 for c in choices)
        view = await open_view(app, pilot)
        summary = text_of(view.query_one("#token-summary", Static))
        assert "mean probability 100.0%" in summary
        assert "0 sampled outside the greedy choice" in summary
        for index, choice in enumerate(choices):
            assert_detail_shows(app, choice, index, len(choices))
            _, probability, sampled, _ = detail(app)
            assert "Probability 100.0% after your sampling settings" in probability
            assert "▸" in sampled.splitlines()[1]  # the chosen token is the top one
            await pilot.press("right")
        await pilot.press("ctrl+q")


@pytest.mark.model
async def test_real_model_recording_off(demo_model: Path) -> None:
    settings = Settings()
    settings.chat.record_token_probs = False
    settings.sampling = SamplingSettings(max_tokens=10, seed=1)
    app = real_app(demo_model, settings)
    async with app.run_test(size=(110, 40)) as pilot:
        reply = await real_chat(app, pilot, "Hi")
        assert reply.token_probs is None
        view = await open_view(app, pilot)
        assert text_of(view.query_one("#token-problem", Static)) == NO_PROBS
        await pilot.press("ctrl+q")


async def test_long_reply_scrolls_to_keep_the_cursor_in_sight() -> None:
    chunks = [f"line {i}\n" for i in range(200)]
    app = make_app(ScriptedEngine(replies=[chunks]))
    async with app.run_test(size=(80, 24)) as pilot:
        await chat_once(app, pilot)
        view = await open_view(app, pilot)
        strip = view.query_one(TokenStrip)
        assert len(strip.lines) == 200 and strip.max_scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert strip.scroll_y == strip.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert strip.scroll_y == 0
        for _ in range(30):
            await pilot.press("down")
        await pilot.pause()
        assert strip.cursor == 30
        assert strip.scroll_y <= 30 < strip.scroll_y + strip.scrollable_content_region.height
        # a click lands on the token drawn there, wherever the view is scrolled
        await pilot.click(strip, offset=(2, 0))
        await pilot.pause()
        assert strip.cursor == int(strip.scroll_y)
