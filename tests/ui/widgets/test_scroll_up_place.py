"""Scrolling up mounts older messages a page at a time above what the user
reads (issue 33 point 4). The page pushes the views below it down over two or
three layouts as its views compose; every one of those layouts scrolls by as
much, so no frame drawn meanwhile shows the page where the user was reading.
The scripted engine stands in for the model."""

from __future__ import annotations

from textual.geometry import Size
from textual.layout import DockArrangeResult

from chat.conversations.conversation import Conversation, Message
from chat.ui.widgets.prompt_box import PromptBox
from tests.conftest import wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, opened_and_settled, pages_settled


def long_conversation() -> Conversation:
    return Conversation(
        messages=[
            Message(
                "user" if i % 2 == 0 else "assistant",
                f"Message {i}: " + "words and more words " * 12,
            )
            for i in range(200)
        ]
    )


async def test_every_layout_while_a_page_mounts_above_keeps_the_place() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        _, view = await opened_and_settled(app, pilot, long_conversation())
        earlier = view.earlier_count
        assert earlier and view.scroll_y >= view.size.height
        # Up to less than a screenful from the top: a page is mounted above.
        view.scroll_to(y=view.size.height - 1, animate=False, immediate=True)
        reading = next(
            v for v in view.message_views_without_system() if v.virtual_region.y >= view.scroll_y
        )
        place = reading.virtual_region.y - round(view.scroll_y)

        places: list[int] = []
        arrange = view.arrange

        def recording(size: Size, optimal: bool = False) -> DockArrangeResult:
            result = arrange(size, optimal)
            for placement in result.placements:
                if placement.widget is reading:
                    places.append(placement.region.y - round(view.scroll_y))
            return result

        view.arrange = recording  # type: ignore[method-assign]
        await wait_for(lambda: view.earlier_count < earlier, pilot)
        await wait_for(lambda: pages_settled(view), pilot)
        await pilot.pause()
        assert places and set(places) == {place}, (place, places)
        assert reading.region.y - view.content_region.y == place


async def test_page_up_and_down_in_the_message_box_scroll_the_conversation() -> None:
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await opened_and_settled(app, pilot, long_conversation())
        box = screen.query_one(PromptBox)
        assert app.focused is box
        await pilot.press(*"half a thought")
        bottom = view.scroll_y
        await pilot.press("pageup")
        await wait_for(lambda: view.scroll_y <= bottom - view.size.height + 1, pilot)
        await pilot.press("pagedown")
        await wait_for(lambda: view.scroll_y == view.max_scroll_y, pilot)
        assert box.text == "half a thought"
        assert app.focused is box


async def test_a_page_up_is_drawn_before_the_page_above_starts_mounting() -> None:
    """The page of older messages a Page Up asks for is mounted after the
    frame that shows the Page Up: composing it first would hold that frame
    back (a page's views take tens of milliseconds to compose). Waiting for
    Textual's next refresh was not enough: it failed 7 runs in 8 here."""
    app = make_app(ScriptedEngine())
    async with app.run_test(size=(80, 24)) as pilot:
        screen, view = await opened_and_settled(app, pilot, long_conversation())
        # Less than two screenfuls from the top: one Page Up asks for a page.
        view.scroll_to(y=view.size.height + 2, animate=False, immediate=True)
        await pilot.pause()
        earlier = view.earlier_count
        drawn: list[float] = []
        screen.screen_layout_refresh_signal.subscribe(
            view, lambda _: drawn.append(view.scroll_y), immediate=True
        )
        mount_page = view._mount_earlier_page
        drawn_when_mounting: list[list[float]] = []

        async def recording() -> None:
            drawn_when_mounting.append(list(drawn))
            await mount_page()

        view._mount_earlier_page = recording  # type: ignore[method-assign]
        # A frame already due (here the message box's) is drawn before the
        # screen hears of the scroll; the page waits for the frame after it.
        screen.query_one(PromptBox).refresh()
        view.scroll_page_up(animate=False)
        await wait_for(lambda: view.earlier_count < earlier, pilot)
        # The Page Up (to less than a screenful from the top) was on screen.
        assert drawn_when_mounting and min(drawn_when_mounting[0]) < view.size.height
