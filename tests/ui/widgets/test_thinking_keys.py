"""alt+t and a click fold and unfold a reply's thinking, with the key as a
real terminal sends it: ESC then t, which Textual reads as "alt+t" carrying
the character "t". The prompt box, focused, typed the t and the key's binding
never ran (Pilot presses "alt+t" with no character, so its tests passed)."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.app import App

from chat.conversations.conversation import ReplyStats
from chat.ui.terminal_input import RunParser
from chat.ui.widgets.prompt_box import PromptBox
from chat.ui.widgets.thinking_block import ThinkingBlock
from tests.conftest import wait_for
from tests.ui.app.test_terminal_input import ticked
from tests.ui.conftest import QUESTION, REPLIES, chat_app, ready, save, saved_conversation

THOUGHT = "The user wants a reversed list. Slicing copies it; reverse() works in place."
STATS = ReplyStats(
    40, 40, 52, 0.05, 80.0, "done", seed=7, total_s=0.7, thinking_tokens=18, first_answer_s=0.45
)


def terminal_keys(data: str) -> list[events.Key]:
    """The key events the app's terminal parser makes of `data`."""
    parser = RunParser()
    seen = [*parser.feed(data), *ticked(parser, bool)]
    assert all(isinstance(event, events.Key) for event in seen), seen
    return seen  # type: ignore[return-value]


def press_alt_t(app: App[None]) -> None:
    """alt+t as the terminal sends it, read by the app's own parser."""
    for key in terminal_keys("\x1bt"):
        key.set_sender(app)
        app.post_message(key)


def test_alt_and_a_letter_types_nothing() -> None:
    (key,) = terminal_keys("\x1bt")
    assert key.key == "alt+t" and key.character is None and not key.is_printable


async def test_alt_t_from_a_terminal_and_a_click_unfold_and_fold_the_thinking(
    tmp_path: Path,
) -> None:
    conv = saved_conversation(QUESTION, "2025-03-14", 1)
    reply = conv.messages[-1]
    reply.content, reply.thinking, reply.stats = REPLIES[1], THOUGHT, STATS
    database = tmp_path / "conversations.db"
    (conv_id,) = save(database, conv)
    app = chat_app(database=database, resume=conv_id)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await wait_for(lambda: app.query(ThinkingBlock), pilot)
        block = app.query_one(ThinkingBlock)
        box = app.query_one(PromptBox)
        box.focus()
        assert block.folded
        press_alt_t(app)
        await wait_for(lambda: not block.folded, pilot)
        press_alt_t(app)
        await wait_for(lambda: block.folded, pilot)
        assert box.text == ""  # nothing typed into the box
        await pilot.click(ThinkingBlock)
        await wait_for(lambda: not block.folded, pilot)
        assert THOUGHT[:30] in str(block.render())
        await pilot.click(ThinkingBlock)
        await wait_for(lambda: block.folded, pilot)


async def test_a_reply_that_ended_thinking_still_says_how_long_it_thought() -> None:
    # Out of tokens (or stopped) mid-thought: no answer came, so the time is
    # from the first token to the end, as it was shown while it streamed.
    from chat.conversations.conversation import Message, ReplyStats
    from chat.ui.widgets.message_view import AssistantMessageView
    from chat.ui.widgets.thinking_block import ThinkingBlock
    from tests.fakes import ScriptedEngine
    from tests.ui.conftest import make_app, ready

    app = make_app(ScriptedEngine())
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await ready(app, pilot)
        view = AssistantMessageView(Message("assistant", ""))
        await screen.query_one("ConversationView").mount(view)
        stats = ReplyStats(30, 30, 40, 0.5, 20.0, "max_tokens", total_s=2.5, thinking_tokens=40)
        await view.finish("", stats, "Still thinking about")
        summary = str(view.query_one(ThinkingBlock).render())
        assert summary.startswith("▸ Thinking · 40 tokens · 2.0 s"), summary
