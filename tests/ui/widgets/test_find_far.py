"""Find a match far above what is mounted (issue 33 point 4): the view jumps
to a page around it instead of mounting every message in between; the
messages below it come back as the user scrolls down, a click on the line at
the bottom goes back to the newest, and sending a message shows the newest
again. The scripted engine stands in for the model."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from chat.conversations.conversation import Conversation, Message
from chat.ui.screens.chat import ChatScreen
from chat.ui.widgets.conversation_view import ConversationView, LaterMessages
from chat.ui.widgets.match_highlight import Place
from chat.ui.widgets.message_view import MessageView, view_for
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, pages_settled, ready, send
from tests.ui.widgets.test_find import counter, find, in_sight

TURNS = 200


def very_long_conversation() -> Conversation:
    """400 messages: only the first says "needle"."""
    messages = [Message("user", "Where is the needle in this haystack?")]
    messages.append(Message("assistant", "Somewhere."))
    for turn in range(1, TURNS):
        messages.append(Message("user", f"Question {turn}: still looking?"))
        messages.append(Message("assistant", f"Answer {turn}. Only hay."))
    return Conversation(messages=messages)


def mounted(view: ConversationView) -> list[Message]:
    return [v.message for v in view.message_views() if v.message.role != "system"]


async def opened(pilot: Pilot[Any]) -> tuple[ChatScreen, ConversationView, Conversation]:
    """The very long conversation open, its newest page shown."""
    screen = await ready(pilot.app, pilot)  # type: ignore[arg-type]
    conversation = very_long_conversation()
    assert await screen.open_conversation(conversation)
    view = screen.query_one(ConversationView)
    await wait_for(lambda: view.earlier_count > 0, pilot)
    return screen, view, conversation


async def jumped_to_the_first(pilot: Pilot[Any]) -> tuple[ChatScreen, ConversationView]:
    app = pilot.app
    screen, view, conversation = await opened(pilot)
    first = conversation.messages[0]
    await find(pilot, "needle")
    assert counter(app) == "1 of 1"  # type: ignore[arg-type]

    def first_in_sight() -> bool:
        views = [v for v in view.message_views() if v.message is first]
        return bool(views) and in_sight(view, views[0])

    await wait_for(first_in_sight, pilot)
    return screen, view


async def test_a_match_400_messages_up_is_reached_without_mounting_those_between() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view = await jumped_to_the_first(pilot)
        shown = mounted(view)
        assert len(shown) <= 2 * ConversationView.FIRST_PAGE, len(shown)
        assert view.later_count >= 2 * TURNS - len(shown) - view.earlier_count
        later = view.query_one(LaterMessages)
        assert "later messages" in str(later.visual)


async def test_scrolling_down_after_the_jump_brings_the_later_messages_back() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view = await jumped_to_the_first(pilot)
        await pilot.press("escape")  # the find bar closed; the view stays where it is
        before = view.later_count
        newest_shown = mounted(view)[-1]
        view.scroll_end(animate=False, immediate=True)
        await wait_for(lambda: view.later_count < before, pilot)
        # The page came below: what was the newest shown is still mounted, in order.
        messages = mounted(view)
        assert newest_shown in messages
        assert messages.index(newest_shown) < len(messages) - 1


async def test_a_click_on_the_later_line_goes_back_to_the_newest() -> None:
    app = make_app(ScriptedEngine())
    # Tall enough that the page around the match and the line below it fit:
    # scrolled down to it, the next page would be mounted first.
    async with app.run_test(size=(80, 100)) as pilot:
        screen, view = await jumped_to_the_first(pilot)
        newest = screen.conversation.messages[-1]
        marker = view.query_one(LaterMessages)
        await wait_for(lambda: bool(marker.region.height), pilot)
        await pilot.click(LaterMessages)
        await wait_for(lambda: view.later_count == 0, pilot)
        await wait_for(lambda: bool(mounted(view)) and mounted(view)[-1] is newest, pilot)
        assert not view.query(LaterMessages)


async def test_sending_after_the_jump_shows_the_newest_and_the_reply() -> None:
    engine = ScriptedEngine(replies=[["found ", "it"]])
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await jumped_to_the_first(pilot)
        await pilot.press("escape")
        await send(pilot, "Any luck?")
        await turn_done(screen, pilot, 2 * TURNS + 2)
        await wait_for(lambda: view.later_count == 0, pilot)
        messages = mounted(view)
        assert [m.content for m in messages[-2:]] == ["Any luck?", "found it"]
        # The whole run below the first page is mounted in order, none twice.
        contents = [m.content for m in messages]
        assert len(contents) == len(set(map(id, messages)))
        assert contents[-3] == f"Answer {TURNS - 1}. Only hay."
        reply = next(v for v in view.message_views() if v.message is messages[-1])
        assert isinstance(reply, MessageView)
        await wait_for(lambda: in_sight(view, reply), pilot)


async def test_scrolling_far_up_keeps_only_a_few_screenfuls_mounted() -> None:
    # Each page mounted above puts the views far below back aside, so the
    # mounted views stay a few screenfuls however far up the user goes.
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view, conversation = await opened(pilot)
        start = view.earlier_count
        most = 0
        while start - view.earlier_count < 100:
            view.scroll_page_up(animate=False)
            await pilot.pause()
            await wait_for(lambda: pages_settled(view), pilot)
            most = max(most, len(mounted(view)))
        assert most <= 4 * ConversationView.FIRST_PAGE, most
        shown = mounted(view)
        assert view.later_count > 0
        assert len(shown) + view.earlier_count + view.later_count == 2 * TURNS
        everything = conversation.messages
        first = everything.index(shown[0])
        assert shown == everything[first : first + len(shown)]
        # Sending a message shows the newest again.
        await send(pilot, "One more question")
        await wait_for(lambda: any(m.content == "One more question" for m in mounted(view)), pilot)
        assert view.later_count == 0


async def test_a_match_mounted_but_not_laid_out_yet_is_scrolled_to_once_it_is() -> None:
    # On a busy machine a page just mounted (as by a jump) may not be laid out
    # by the refresh after it: its place is unknown then, and scrolling by it
    # would go nowhere useful. The scroll waits for the layout instead.
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view, _ = await opened(pilot)
        bar = await find(pilot, "no such word")
        view.anchor(False)  # as a jump leaves it
        oldest = view.message_views_without_system()[0]
        match = view_for(Message("user", "Where is the needle?"))
        mounting = view.mount(match, before=oldest)
        assert not match.region  # mounted, not laid out yet
        bar._scroll_to_place(Place(match, 0))
        await mounting
        await wait_for(lambda: in_sight(view, match), pilot, timeout=3.0)
