"""Find in the conversation (Ctrl+F): the bar, the highlights, moving between
matches, older messages mounted to reach one, Esc. Find touches no model: the
scripted engine stands in."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Input, Static

from chat.conversations.conversation import Conversation, Message
from chat.sanitize import sanitize
from chat.ui.app import ChatApp
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.find_bar import FindBar, _as_shown
from chat.ui.widgets.match_highlight import CURRENT_STYLE, MATCH_STYLE
from chat.ui.widgets.message_view import MessageView
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, opened_and_settled, ready, run_command, send

REPLY = (
    "Use a **list** comprehension:\n\n"
    "```python\nsquares = [n * n for n in range(10)]  # a list\n```\n\n"
    "- a List is ordered\n- a tuple is not a list\n\n"
    "| type | mutable |\n| --- | --- |\n| list | yes |\n| tuple | no |\n"
)


def highlights(app: ChatApp) -> list[tuple[str, str]]:
    """Every highlighted word on screen, in reading order: (text, style)."""
    found = []
    for widget in app.chat_screen.query(".find-highlighted").results(Static):
        content = widget.visual
        assert isinstance(content, Content)
        for span in content.spans:
            if span.style in (MATCH_STYLE, CURRENT_STYLE):
                found.append((content.plain[span.start : span.end], str(span.style)))
    return found


def counter(app: ChatApp) -> str:
    return str(app.chat_screen.query_one("#find-count", Static).visual)


async def find(pilot, text: str) -> FindBar:  # type: ignore[no-untyped-def]
    """Ctrl+F, then type `text` into the bar."""
    app = pilot.app
    await pilot.press("ctrl+f")
    await wait_for(lambda: app.chat_screen.query(FindBar), pilot)
    bar = app.chat_screen.query_one(FindBar)
    await wait_for(lambda: isinstance(app.focused, Input), pilot)
    await pilot.press(*text)
    await wait_for(lambda: bar.search.query == text, pilot)
    await pilot.pause()
    return bar


async def test_matches_are_highlighted_counted_and_stepped_through_with_wrapping() -> None:
    engine = ScriptedEngine(replies=[[REPLY], ["No LIST here? A list."]])
    app = make_app(engine)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "How do I build a list?")
        await turn_done(screen, pilot, 2)
        await send(pilot, "Thanks")
        await turn_done(screen, pilot, 4)

        bar = await find(pilot, "list")
        # 1 in the question, 5 in the first reply (paragraph, code, list items,
        # table), 2 in the second reply; any case.
        assert counter(app) == "8 of 8"  # the newest is current
        await wait_for(lambda: len(highlights(app)) == 8, pilot)
        words = highlights(app)
        assert [word for word, _ in words] == [
            "list",
            "list",
            "list",
            "List",
            "list",
            "list",
            "LIST",
            "list",
        ]
        assert [style for _, style in words].count(CURRENT_STYLE) == 1
        assert words[-1] == ("list", CURRENT_STYLE)

        await pilot.press("enter")  # the one before
        assert counter(app) == "7 of 8"
        await wait_for(lambda: highlights(app)[-2] == ("LIST", CURRENT_STYLE), pilot)
        await pilot.press("up")
        assert counter(app) == "6 of 8"
        await pilot.press("down", "down")
        assert counter(app) == "8 of 8"
        await pilot.press("down")  # past the last: the first, in the question
        assert counter(app) == "1 of 8"
        await wait_for(lambda: highlights(app)[0] == ("list", CURRENT_STYLE), pilot)
        await pilot.press("up")  # before the first: the last
        assert counter(app) == "8 of 8"
        await pilot.press("shift+enter")  # as ↓
        assert counter(app) == "1 of 8"

        # The code block's match is highlighted in its (syntax-highlighted) text.
        code = screen.query_one("MarkdownFence #code-content", Static)
        assert code.has_class("find-highlighted")

        await pilot.press("backspace", "backspace", "backspace", "backspace", *"tuple")
        await wait_for(lambda: counter(app) == "2 of 2", pilot)  # a list item, a table cell
        await pilot.press("x")
        await wait_for(lambda: counter(app) == "no matches", pilot)
        assert highlights(app) == []
        assert bar.is_open


async def test_esc_removes_the_highlights_and_gives_the_focus_back() -> None:
    engine = ScriptedEngine(replies=[["A list, and another list."]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "list please")
        await turn_done(screen, pilot, 2)
        bar = await find(pilot, "list")
        assert counter(app) == "3 of 3"
        assert len(highlights(app)) == 3

        await pilot.press("escape")
        await pilot.pause()
        assert not bar.is_open
        assert not bar.display
        assert highlights(app) == []
        assert not screen.query(".find-highlighted")
        assert isinstance(app.focused, PromptBox)
        assert not screen.generating  # Esc closed find; it stopped nothing

        # Ctrl+F again: the same query, selected, and its highlights back.
        await pilot.press("ctrl+f")
        await wait_for(lambda: len(highlights(app)) == 3, pilot)
        box = screen.query_one("#find-input", Input)
        assert box.value == "list"
        assert box.selected_text == "list"


async def test_markup_in_a_message_is_found_as_written_and_never_interpreted() -> None:
    engine = ScriptedEngine(
        replies=[["Rich writes [bold]x[/] for bold, and [@click=app.quit]q[/]."]]
    )
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "What is [bold]x[/] in Rich?")
        await turn_done(screen, pilot, 2)
        await find(pilot, "[bold]x[/]")
        assert counter(app) == "2 of 2"
        await wait_for(lambda: len(highlights(app)) == 2, pilot)
        assert [word for word, _ in highlights(app)] == ["[bold]x[/]", "[bold]x[/]"]
        user = screen.query_one(".message.user .message-body", Static)
        assert isinstance(user.visual, Content)
        assert user.visual.plain == "What is [bold]x[/] in Rich?"

        await pilot.press("ctrl+a", "ctrl+k", *"[@click")
        await wait_for(lambda: counter(app) == "1 of 1", pilot)
        # The match is drawn as written: nothing was run.
        await wait_for(lambda: [word for word, _ in highlights(app)] == ["[@click"], pilot)
        assert app.is_running


def long_conversation() -> Conversation:
    """40 turns: the first question, the only one that says "needle", is far
    above what is mounted when the conversation opens."""
    messages = [Message("user", "Where is the needle in this haystack?")]
    messages.append(Message("assistant", "Somewhere.\n" * 5))
    for turn in range(1, 40):
        messages.append(Message("user", f"Question {turn}: still looking?"))
        messages.append(Message("assistant", f"Answer {turn}.\n\nStill hay.\n\nOnly hay."))
    messages.append(Message("user", "Found the Needle!"))
    messages.append(Message("assistant", "Well done."))
    return Conversation(messages=messages)


def in_sight(view: ConversationView, widget: MessageView) -> bool:
    top = widget.region.y
    return view.region.y <= top < view.region.bottom


async def test_a_match_in_an_older_message_not_mounted_yet_is_reached_and_scrolled_to() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await ready(app, pilot)
        conversation = long_conversation()
        assert await screen.open_conversation(conversation)
        view = screen.query_one(ConversationView)
        first = conversation.messages[0]
        await pilot.pause()
        assert view.earlier_count > 0
        assert not any(v.message is first for v in view.message_views())

        await find(pilot, "needle")
        assert counter(app) == "2 of 2"  # counted in messages not mounted too
        newest = next(v for v in view.message_views() if v.message.content.startswith("Found"))
        await wait_for(lambda: in_sight(view, newest), pilot)

        await pilot.press("enter")  # the first question, 80 messages up
        assert counter(app) == "1 of 2"

        def first_in_sight() -> bool:
            views = [v for v in view.message_views() if v.message is first]
            return bool(views) and in_sight(view, views[0])

        await wait_for(first_in_sight, pilot)
        # And it stays there once the pages above settle: every page is
        # mounted, and each kept the view where it was after its refresh.
        await wait_for(lambda: view.earlier_count == 0, pilot)
        await pilot.wait_for_scheduled_animations()
        assert first_in_sight()
        assert ("needle", CURRENT_STYLE) in highlights(app)


async def test_a_reply_joins_the_search_once_it_ends() -> None:
    engine = ScriptedEngine(replies=[["cat ", "cat ", "cat"], ["one ", "more ", "cat"]])
    app = make_app(engine)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "cat?")
        await turn_done(screen, pilot, 2)
        await find(pilot, "cat")
        assert counter(app) == "4 of 4"

        engine.hold_after = 2
        await send(pilot, "another cat")
        await wait_for(engine.holding.is_set, pilot)
        await pilot.pause()
        # The reply streaming ("one more ") is left out of the search.
        (streaming,) = [view for view in screen.query(MessageView) if view.streaming]
        assert not streaming.query(".find-highlighted")
        engine.release.set()
        await turn_done(screen, pilot, 4)
        # Ended, it is searched: "another cat" and "one more cat" join.
        await wait_for(lambda: counter(app) == "4 of 6", pilot)
        await wait_for(lambda: len(highlights(app)) == 6, pilot)


async def test_the_palette_opens_find() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test() as pilot:
        screen: ChatScreen = await ready(app, pilot)
        await run_command(pilot, "find in", "Find in the conversation")
        await wait_for(lambda: screen.query(FindBar) and screen.query_one(FindBar).is_open, pilot)
        assert isinstance(app.focused, Input)


async def test_a_new_conversation_has_nothing_to_find() -> None:
    app = make_app(ScriptedEngine(replies=[["A cat."]]))
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "cat?")
        await turn_done(screen, pilot, 2)
        await find(pilot, "cat")
        assert counter(app) == "2 of 2"
        await pilot.press("ctrl+n")
        await wait_for(lambda: counter(app) == "no matches", pilot)


async def test_a_match_deep_in_a_long_code_block_is_scrolled_to_its_line() -> None:
    code = "\n".join(f"line_{n} = {n}" for n in range(80)).replace("line_60 =", "needle =")
    messages = [
        Message("user", "Show me the code"),
        Message("assistant", f"```python\n{code}\n```"),
    ]
    for turn in range(5):
        messages += [Message("user", f"More {turn}?"), Message("assistant", f"Reply {turn}.")]
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await ready(app, pilot)
        assert await screen.open_conversation(Conversation(messages=messages))
        await pilot.pause()
        assert "needle" not in app.export_screenshot()
        await find(pilot, "needle")
        assert counter(app) == "1 of 1"
        view = screen.query_one(ConversationView)
        await wait_for(lambda: view.scroll_y < view.max_scroll_y, pilot)
        await pilot.wait_for_scheduled_animations()  # the scroll to the match is done
        await pilot.press("escape")  # the bar, with "needle" typed in it, goes; the view stays
        await pilot.pause()
        assert "needle" in app.export_screenshot()


def test_messages_are_searched_as_they_are_shown() -> None:
    """Sanitized, as the message views show them; text without control
    characters is taken as it is (sanitizing a long conversation is slow)."""
    for text in ["plain ßtraße\n\ttabbed", "red \x1b[31mtext\x1b[0m", "osc \x1b]0;title\x07 end"]:
        assert _as_shown(text) == sanitize(text)
    assert _as_shown("red \x1b[31mtext") == "red text"


async def test_a_match_on_the_top_row_brings_its_message_top_into_sight() -> None:
    # The match's row is in sight, but the line saying whose message it is
    # lies just above the view: scrolled so that both show.
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view = await opened_and_settled(app, pilot, long_conversation())
        question = next(
            v for v in view.message_views() if v.message.content.startswith("Question 35:")
        )
        view.anchor(False)
        view.scroll_to(y=question.virtual_region.y + 1, animate=False, immediate=True)
        await pilot.pause()
        assert not in_sight(view, question)
        bar = await find(pilot, "")
        bar.query_one("#find-input", Input).value = "Question 35:"  # at once, as pasted
        await wait_for(lambda: bar.search.query == "Question 35:", pilot)
        assert counter(app) == "1 of 1"
        await wait_for(lambda: in_sight(view, question), pilot)
        assert ("Question 35:", CURRENT_STYLE) in highlights(app)
