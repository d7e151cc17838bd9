"""Branches, driven with Pilot on a scripted model: regenerate keeps the old
reply, editing a message or a reply makes an alternative, ‹ n/m › and
alt+←/→ (or a click) switch between them, the next prompt follows the branch
shown, fork makes a new conversation, and the branch shown is what reopens."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import pytest
from textual.widgets import Static, TextArea

from chat import paths
from chat.conversations.store import Store
from chat.engine.state_cache import StateCache
from chat.models.files import ModelCandidate
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.screens.dialogs import EditReplyScreen
from chat.ui.screens.help import HelpScreen
from chat.ui.widgets.context_meter import ContextMeter
from chat.ui.widgets.message_view import BranchSwitch, MessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import header_of, make_app, on_top, ready, run_command, send

REPLIES = [["first"], ["second"], ["third"], ["fourth"], ["fifth"], ["sixth"]]


def contents(screen) -> list[str]:  # type: ignore[no-untyped-def]
    return [message.content for message in screen.conversation.messages]


def shown(screen) -> list[str]:  # type: ignore[no-untyped-def]
    """The message texts of the views on screen, system prompt left out."""
    return [
        view.message.content for view in screen.query(MessageView) if view.message.role != "system"
    ]


def switch_text(screen, index: int) -> str:  # type: ignore[no-untyped-def]
    """What the branch switch of the index-th message on screen says ('' if hidden)."""
    views = [v for v in screen.query(MessageView) if v.message.role != "system"]
    switch = views[index].query_one(BranchSwitch)
    return str(switch.render()) if switch.display else ""


async def turn(screen, pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    count = len(screen.conversation.messages)
    await send(pilot, text)
    await wait_for(
        lambda: not screen.generating and len(screen.conversation.messages) == count + 2, pilot
    )


async def test_regenerate_keeps_the_old_reply_and_alt_arrows_switch() -> None:
    engine = ScriptedEngine(replies=REPLIES)
    app = make_app(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await turn(screen, pilot, "hi")
        await pilot.press("ctrl+r")
        await wait_for(
            lambda: not screen.generating and contents(screen) == ["hi", "second"], pilot
        )
        assert shown(screen) == ["hi", "second"]
        assert switch_text(screen, 1) == "‹ 2/2 ›"
        await pilot.press("alt+left")
        await wait_for(lambda: contents(screen) == ["hi", "first"], pilot)
        assert shown(screen) == ["hi", "first"]
        assert switch_text(screen, 1) == "‹ 1/2 ›"
        # The next turn continues the branch shown: its prompt holds "first".
        await turn(screen, pilot, "more")
        prompt = engine.calls[-1][0]
        assert [m["content"] for m in prompt[1:]] == ["hi", "first", "more"]
        await pilot.press("alt+right")
        await wait_for(lambda: contents(screen) == ["hi", "second"], pilot)
        assert shown(screen) == ["hi", "second"]
        # ...and back: the branch through "first" comes back down to its newest message.
        await pilot.press("alt+left")
        await wait_for(lambda: contents(screen) == ["hi", "first", "more", "third"], pilot)
        # The headers of the branch switched to show each message's tokens.
        views = [v for v in screen.query(MessageView) if v.message.role != "system"]
        await wait_for(
            lambda: all(" token" in header_of(v) for v in views),
            pilot,
        )
        # The help tells of the branch keys on one line (alt+→ had its own too).
        await pilot.press("f1")
        help_screen = await on_top(pilot, HelpScreen)
        lines = [str(item.render()) for item in help_screen.query(Static).results()]
        assert [line for line in lines if "alternative" in line.lower()] == [
            "Show the previous or next alternative of a message"
        ]
        await pilot.press("escape")
        await wait_for(lambda: app.screen is screen, pilot)
        conv_id = screen.conversation.id
    assert conv_id is not None
    with Store() as store:
        saved = store.get_conversation(conv_id)
    # Reopened on the branch last shown, every branch kept.
    assert [m.content for m in saved.messages] == ["hi", "first", "more", "third"]
    assert len(saved.tree) == 5


async def test_edit_a_message_sends_a_new_branch_and_keeps_the_original() -> None:
    engine = ScriptedEngine(replies=REPLIES)
    app = make_app(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await turn(screen, pilot, "one")
        await turn(screen, pilot, "two")
        box = app.query_one(PromptBox)
        box.insert("a draft")
        await pilot.press("f3")  # no selection: your last message
        assert box.text == "two"
        assert app.query_one("#editing").display
        # The meter counts the two messages before it, not the whole conversation.
        meter = app.query_one(ContextMeter)
        earlier = sum(m.token_count or 0 for m in screen.conversation.messages[:2])
        assert 0 < earlier < sum(m.token_count or 0 for m in screen.conversation.messages)
        await wait_for(lambda: meter.state is not None and meter.state.history == earlier, pilot)
        # Esc stops editing: the draft comes back, nothing changed.
        await pilot.press("escape")
        assert box.text == "a draft"
        assert not app.query_one("#editing").display
        # Select the first message and edit it.
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+up")
        await pilot.press("f3")
        assert box.text == "one"
        # The meter counts what sending the edit sends: nothing before it (it
        # counted the whole conversation, the edited message and all after).
        await wait_for(lambda: meter.state is not None and meter.state.history == 0, pilot)
        # Quitting now would keep the draft set aside, not the unchanged edit...
        draft = screen.message_draft
        assert draft.unsent() == "a draft"
        box.insert(" (edited)")
        # ...and with the edit changed, both.
        assert draft.unsent() == "a draft\none (edited)"
        await pilot.press("enter")
        await wait_for(
            lambda: not screen.generating and contents(screen) == ["one (edited)", "third"], pilot
        )
        assert box.text == "a draft"
        assert shown(screen) == ["one (edited)", "third"]
        assert switch_text(screen, 0) == "‹ 2/2 ›"
        assert [m["content"] for m in engine.calls[-1][0][1:]] == ["one (edited)"]
        # The original and everything after it are one alt+← away.
        await pilot.press("alt+left")
        await wait_for(lambda: contents(screen) == ["one", "first", "two", "second"], pilot)
        assert switch_text(screen, 0) == "‹ 1/2 ›"


async def test_click_on_the_branch_switch() -> None:
    app = make_app(ScriptedEngine(replies=REPLIES))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await turn(screen, pilot, "hi")
        await pilot.press("ctrl+r")
        await wait_for(
            lambda: not screen.generating and contents(screen) == ["hi", "second"], pilot
        )
        await pilot.pause()
        switch = next(v for v in screen.query(MessageView) if v.message.content == "second")
        await pilot.click(switch.query_one(BranchSwitch), offset=(1, 0))  # the ‹ half
        await wait_for(lambda: contents(screen) == ["hi", "first"], pilot)
        await pilot.pause()
        switch = next(v for v in screen.query(MessageView) if v.message.content == "first")
        branch = switch.query_one(BranchSwitch)
        await pilot.click(branch, offset=(branch.size.width - 1, 0))  # the › half
        await wait_for(lambda: contents(screen) == ["hi", "second"], pilot)


async def test_edit_a_reply_in_the_dialog() -> None:
    engine = ScriptedEngine(replies=REPLIES)
    app = make_app(engine)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await turn(screen, pilot, "hi")
        await pilot.press("alt+up")  # the reply
        await pilot.press("f3")
        await wait_for(lambda: isinstance(app.screen, EditReplyScreen), pilot)
        area = app.screen.query_one(TextArea)
        area.text = "a better answer"
        await pilot.press("ctrl+s")
        await wait_for(lambda: contents(screen) == ["hi", "a better answer"], pilot)
        assert switch_text(screen, 1) == "‹ 2/2 ›"
        # The edited reply's header counts its tokens, as every other one does.
        edited = [v for v in screen.query(MessageView) if v.message.role != "system"][1]
        await wait_for(lambda: " token" in header_of(edited), pilot)
        await turn(screen, pilot, "go on")
        assert [m["content"] for m in engine.calls[-1][0][1:]] == ["hi", "a better answer", "go on"]
        await pilot.press("alt+up", "alt+up", "alt+up", "alt+left")  # the edited reply
        await wait_for(lambda: contents(screen) == ["hi", "first"], pilot)


async def test_fork_from_the_palette_makes_a_new_saved_conversation() -> None:
    app = make_app(ScriptedEngine(replies=REPLIES))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await ready(app, pilot)
        await turn(screen, pilot, "one")
        await turn(screen, pilot, "two")
        original = screen.conversation.id
        await pilot.press("alt+up", "alt+up", "alt+up")  # the first reply
        await run_command(pilot, "fork conv", "Fork conversation here")
        await wait_for(lambda: contents(screen) == ["one", "first"], pilot)
        assert shown(screen) == ["one", "first"]
        forked = screen.conversation.id
        assert forked is not None and forked != original
        assert screen.conversation.title.endswith("(fork)")
        await turn(screen, pilot, "three")
    with Store() as store:
        assert [m.content for m in store.get_conversation(forked).messages] == [
            "one",
            "first",
            "three",
            "third",
        ]
        assert len(store.get_conversation(original).messages) == 4


def real_app(demo_model: Path, conv_id: int | None = None, prefill: bool = True) -> ChatApp:
    settings = Settings()
    settings.chat.prefill = prefill
    settings.sampling.max_tokens = 24
    settings.sampling.seed = 7
    return ChatApp(
        Launch(
            settings,
            ModelCandidate(demo_model, demo_model.stat().st_size, "demo"),
            resume=conv_id,
        )
    )


async def real_turn(screen, pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    count = len(screen.conversation.messages)
    await send(pilot, text)
    await wait_for(
        lambda: not screen.generating and len(screen.conversation.messages) == count + 2,
        pilot,
        timeout=120,
    )


@pytest.mark.model
async def test_real_model_branch_switch_evaluates_only_past_the_common_prefix(
    demo_model: Path,
) -> None:
    """Regenerate, switch back to the first reply and go on: the prompt after the
    switch evaluates the new message, not the conversation again."""
    app = real_app(demo_model)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        await real_turn(screen, pilot, "Name a colour.")
        first = screen.conversation.messages[-1]
        await pilot.press("ctrl+r")
        await wait_for(
            lambda: not screen.generating and screen.conversation.messages[-1] is not first,
            pilot,
            timeout=120,
        )
        await pilot.press("alt+left")
        await wait_for(lambda: screen.conversation.messages[-1] is first, pilot)
        await real_turn(screen, pilot, "Another one?")
        stats = screen.conversation.messages[-1].stats
        assert stats is not None
        # The switch saved and put back the first reply's cache (or the prefill
        # evaluated it ahead): only the new message is evaluated at send.
        assert stats.prompt_evaluated < 25, stats
        assert stats.prompt_tokens > 40


@pytest.mark.model
async def test_real_model_reopened_conversation_resumes_from_its_saved_cache(
    demo_model: Path,
) -> None:
    """Chat, quit, start a new app on the same data and cache folders with the
    conversation: its KV cache is read back, the next reply evaluates only the
    new message, even with prefill off (nothing evaluated ahead) and the
    message sent at once (the reply's thread restores the state first)."""
    app = real_app(demo_model)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        await real_turn(screen, pilot, "Tell me about the sea.")
        await real_turn(screen, pilot, "And the mountains?")
        conv_id = screen.conversation.id
        sent = screen.conversation.messages[-1].stats
        # As a user reading the reply: its seeded tokens evaluated again in the
        # background first. A quit during that pass saves what it has done
        # (docs/kv-cache.md): the reply's rest is then evaluated with the next
        # message, over the 25 below (34 in a CI run that quit at once).
        await screen.turn.rebatched()
        await pilot.press("ctrl+q")
    assert conv_id is not None and sent is not None
    assert StateCache(paths.kv_states_dir(), 0).keys(), "no state was saved on quit"

    app = real_app(demo_model, conv_id, prefill=False)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        await wait_for(lambda: len(screen.conversation.messages) == 4, pilot)
        assert conv_id in screen.session.resumable()  # ⚡ in the browser (Ctrl+O)
        await real_turn(screen, pilot, "And rivers?")
        stats = screen.conversation.messages[-1].stats
        assert stats is not None
        assert stats.prompt_evaluated < 25, stats


@pytest.mark.model
async def test_real_model_quit_right_after_a_reply_on_a_slow_machine_saves_its_cache(
    demo_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+Q as a seeded reply ends, on a machine that evaluates 20 tokens a
    second: the reply's tokens are being evaluated again in the background.
    The save waits for that pass's current batch, which is short, for as long
    as quitting may take; the conversation is saved for instant resume."""
    evaluate = llama_cpp.Llama.eval

    def slow_eval(self: llama_cpp.Llama, tokens: Sequence[int]) -> None:
        time.sleep(0.05 * len(tokens))
        evaluate(self, tokens)

    monkeypatch.setattr(llama_cpp.Llama, "eval", slow_eval)
    app = real_app(demo_model)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        await real_turn(screen, pilot, "Tell me about the sea.")
        await pilot.press("ctrl+q")
    assert StateCache(paths.kv_states_dir(), 0).keys(), "no state was saved on quit"


@pytest.mark.model
async def test_real_model_edit_a_message_then_fork_from_the_old_branch(demo_model: Path) -> None:
    """F3 on the first message, send the edit: a new branch with its own reply,
    the original kept. Back on the original, fork it into a new conversation:
    that conversation goes on from the cache (only the new message evaluated)."""
    app = real_app(demo_model)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None, pilot, timeout=60)
        await real_turn(screen, pilot, "Name a fruit.")
        original = list(screen.conversation.messages)
        await pilot.press("alt+up", "alt+up")  # the first message
        await pilot.press("f3")
        box = screen.query_one(PromptBox)
        await wait_for(lambda: box.text == "Name a fruit.", pilot)
        box.text = "Name a vegetable."
        await pilot.press("enter")
        await wait_for(
            lambda: (
                not screen.generating
                and contents(screen)[0] == "Name a vegetable."
                and len(contents(screen)) == 2
            ),
            pilot,
            timeout=120,
        )
        assert switch_text(screen, 0) == "‹ 2/2 ›"
        await pilot.press("alt+up", "alt+up", "alt+left")  # back to the original
        await wait_for(lambda: screen.conversation.messages == original, pilot)
        await pilot.press("alt+down")  # its reply
        first_id = screen.conversation.id
        await run_command(pilot, "fork conv", "Fork conversation here")
        await wait_for(lambda: screen.conversation.id not in (None, first_id), pilot)
        assert contents(screen) == [m.content for m in original]
        await real_turn(screen, pilot, "Is it sweet?")
        stats = screen.conversation.messages[-1].stats
        assert stats is not None and stats.prompt_evaluated < 25, stats
        forked = screen.conversation.id
    assert forked is not None and first_id is not None
    with Store() as store:
        assert len(store.get_conversation(forked).messages) == 4
        assert len(store.get_conversation(first_id).tree) == 4  # both branches kept
