"""The scrolling conversation: one view per message, pinned to the bottom while a
reply streams unless the user scrolls up.

A reopened conversation may hold thousands of messages. Mounting a message
view is slow (Markdown parsing, styles, layout; docs/performance.md), so
mounting them all would take far too long. Only the newest `FIRST_PAGE` are mounted at once;
older ones wait in `_earlier` and are mounted `PAGE` at a time whenever less
than a screenful is left above what the user sees: right after opening, and as
the user scrolls up. The line at the top says how many are left (click: more).

Find can land far above what is mounted (a match 400 messages up). Mounting
every page down to it would take seconds, so the view jumps instead: it shows
a page around the match, with the messages below it waiting in `_later`
(mounted a page at a time as the user scrolls down; a click on the line at the
bottom goes back to the newest). Anything that adds to the conversation (a
message sent, a reply started, another branch) first shows the newest again.

Scrolling up works the same way in reverse: each page mounted above puts the
views that begin more than `KEEP_SCREENS` screenfuls below what the user sees
back in `_later`, so the mounted views stay a few screenfuls however far up the
user goes (every mounted view is laid out again on each change, so a page cost
more with each one kept).

The same goes for a conversation that grows long as the user chats: when a
reply starts, views that end more than `KEEP_SCREENS` screenfuls above the
bottom go back to `_earlier`. Each delivery of a streamed reply that adds a
line makes Textual lay out every widget on the screen, mounted messages
included, so without this the UI's cost per token grew with the conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual import events
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Size
from textual.layout import DockArrangeResult
from textual.message import Message as TextualMessage
from textual.scrollbar import ScrollBar
from textual.widgets import Static

from chat.conversations.conversation import Message
from chat.conversations.tree import index_of
from chat.ui.textual_fixes import textual_known
from chat.ui.widgets.message_view import (
    AssistantMessageView,
    MessageView,
    SystemMessageView,
    view_for,
)
from chat.ui.widgets.row_scrollbar import RowScrollBar
from chat.ui.widgets.sized_by_layout import DrawnAgainByTheLayout, SizedByTheLayout


class EarlierMessages(Static):
    """The line above the oldest mounted message: how many are not shown yet."""

    DEFAULT_CSS = """
    EarlierMessages {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        color: $text-muted;
        text-align: center;
    }
    EarlierMessages:hover {
        color: $text;
        background: $boost;
    }
    """

    def show_count(self, count: int) -> None:
        noun = "message" if count == 1 else "messages"
        self.update(
            Content(f"▲ {count:,} earlier {noun}: scroll up or click to show more"),
        )

    def on_click(self, event: events.Click) -> None:
        event.stop()
        view = self.parent
        if isinstance(view, ConversationView):
            view.request_earlier()


class LaterMessages(Static):
    """The line below the newest mounted message after find jumped up: how
    many newer messages are not shown yet."""

    DEFAULT_CSS = """
    LaterMessages {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        color: $text-muted;
        text-align: center;
    }
    LaterMessages:hover {
        color: $text;
        background: $boost;
    }
    """

    def show_count(self, count: int) -> None:
        noun = "message" if count == 1 else "messages"
        self.update(
            Content(f"▼ {count:,} later {noun}: scroll down, or click to go to the newest"),
        )

    def on_click(self, event: events.Click) -> None:
        event.stop()
        view = self.parent
        if isinstance(view, ConversationView):
            view.run_worker(view.show_latest(), group="latest")


class ConversationView(SizedByTheLayout, DrawnAgainByTheLayout, VerticalScroll):
    FIRST_PAGE = 16
    """Message views mounted when a conversation opens: more than a screenful."""
    PAGE = 10
    """Older message views mounted at a time, as the user scrolls up."""
    JUMP_BEYOND = 3
    """A message more than this many pages above the mounted ones is shown by
    jumping to it, not by mounting every page in between."""
    KEEP_SCREENS = 2
    """When a reply starts, the views within this many screenfuls of the bottom
    stay mounted (a screenful above what the user sees, so `_fill_above` has
    nothing to do); older ones are unmounted. Scrolling up, the views more than
    this many screenfuls below what the user sees are unmounted."""

    @dataclass
    class PageShown(TextualMessage):
        """Message `views` were mounted besides those shown, older or newer (the
        screen marks their branches and window state)."""

        views: list[MessageView]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._earlier: list[Message] = []
        """Messages older than the oldest mounted view, oldest first."""
        self._later: list[Message] = []
        """Messages newer than the newest mounted view (after a jump), oldest first."""
        self._mounting_earlier = False
        self._mounting_later = False
        self._keeping_place = False
        self._held_place: tuple[MessageView, int] | None = None
        """While a page mounts above: the view that was the oldest shown and
        where it was laid out last (see `arrange`)."""
        # Pages are mounted one at a time: scrolling up and find (`reveal`) both mount them.
        self._earlier_lock = asyncio.Lock()
        self._after_scroll_drawn: set[Callable[[], None]] = set()
        """Pages to mount once the frame that shows a scroll is drawn (`watch_scroll_y`)."""

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        """The view's scrollbar: one that draws again only the rows that
        change (chat.ui.widgets.row_scrollbar), made as Textual makes its
        own, on the Textual versions that was checked with."""
        if self._vertical_scrollbar is None and textual_known():
            thickness = self.scrollbar_size_vertical
            bar = RowScrollBar(vertical=True, name="vertical", thickness=thickness)
            bar.display = False
            self._vertical_scrollbar = bar
            self.app._start_widget(self, bar)
        return super().vertical_scrollbar

    def on_mount(self) -> None:
        self.screen.screen_layout_refresh_signal.subscribe(self, self._scroll_drawn)

    def _scroll_drawn(self, _: object) -> None:
        """A layout was drawn, with the view's scroll as it is: the pages the
        scroll asked for start now."""
        requests, self._after_scroll_drawn = self._after_scroll_drawn, set()
        for request in requests:
            request()

    @property
    def earlier_count(self) -> int:
        return len(self._earlier)

    @property
    def later_count(self) -> int:
        return len(self._later)

    async def add_message(self, message: Message) -> MessageView:
        await self.show_latest()
        view = view_for(message)
        await self.mount(view)
        self.anchor()
        return view

    async def show_messages(self, system: Message | None, messages: Sequence[Message]) -> None:
        """Replace everything with a whole conversation: the system prompt, then the
        newest FIRST_PAGE messages; older ones follow as described above."""
        await self.clear()
        first = self.FIRST_PAGE
        self._later = []
        self._earlier = list(messages[:-first]) if len(messages) > first else []
        widgets: list[Static | MessageView] = [] if system is None else [view_for(system)]
        if self._earlier:
            marker = EarlierMessages(markup=False)
            marker.show_count(len(self._earlier))
            widgets.append(marker)
        widgets += [view_for(message) for message in messages[-first:]]
        await self.mount_all(widgets)
        self.anchor()
        self.call_after_refresh(self._fill_above)

    def _fill_above(self) -> None:
        """Keep at least a screenful of messages mounted above the view."""
        if self.scroll_y < self.size.height:
            self.request_earlier()

    def request_earlier(self) -> None:
        """Mount the next page of older messages, unless that is already under way."""
        if self._earlier and not self._mounting_earlier:
            self._mounting_earlier = True
            self.run_worker(self.show_earlier(), group="earlier")

    async def show_earlier(self) -> None:
        """Mount the next PAGE older messages above the oldest one shown, keeping
        what the user is looking at in place."""
        try:
            async with self._earlier_lock:
                await self._mount_earlier()
        finally:
            self._mounting_earlier = False

    async def reveal(self, message: Message) -> MessageView | None:
        """The view of `message`, mounted if need be: the pages down to it when
        it is near, else by jumping to it (see the module's docstring); None
        when it is not shown."""
        index = next((i for i, older in enumerate(self._earlier) if older is message), None)
        below = any(newer is message for newer in self._later)
        far_up = (
            index is not None
            and len(self._earlier) - index > self.JUMP_BEYOND * self.PAGE
            and not self._streaming()
        )
        if below or far_up:
            async with self._earlier_lock:
                await self._jump(self._earlier_and_shown_and_later(), message)
        else:
            while any(older is message for older in self._earlier):
                await self.show_earlier()
        return next((view for view in self.message_views() if view.message is message), None)

    def _streaming(self) -> bool:
        """A reply streams into one of the views: they must stay mounted."""
        return any(view.streaming for view in self.message_views())

    def _earlier_and_shown_and_later(self) -> list[Message]:
        shown = [view.message for view in self.message_views_without_system()]
        return self._earlier + shown + self._later

    async def _jump(self, messages: list[Message], target: Message) -> None:
        """Show a page of `messages` around `target`: those above wait in
        `_earlier`, those below in `_later`."""
        index = next(i for i, message in enumerate(messages) if message is target)
        start = max(0, min(index - self.PAGE // 2, len(messages) - self.FIRST_PAGE))
        end = start + self.FIRST_PAGE
        self._earlier, self._later = messages[:start], messages[end:]
        # Pinned to the bottom, the view would follow the bottom of the page
        # instead of staying on the match; showing the newest anchors it again.
        self.anchor(False)
        await self.remove_children([*self.message_views_without_system(), *self._markers()])
        widgets: list[Static | MessageView] = []
        if self._earlier:
            earlier = EarlierMessages(markup=False)
            earlier.show_count(len(self._earlier))
            widgets.append(earlier)
        views = [view_for(message) for message in messages[start:end]]
        widgets += views
        if self._later:
            later = LaterMessages(markup=False)
            later.show_count(len(self._later))
            widgets.append(later)
        await self.mount_all(widgets)
        self.post_message(self.PageShown(views))

    def message_views_without_system(self) -> list[MessageView]:
        return [view for view in self.message_views() if not isinstance(view, SystemMessageView)]

    def _markers(self) -> list[Static]:
        return [*self.query(EarlierMessages), *self.query(LaterMessages)]

    async def show_latest(self) -> None:
        """After a jump: show the newest messages again, as when the conversation
        was opened (nothing to do when they are shown)."""
        if not self._later:
            return
        async with self._earlier_lock:
            if not self._later:
                return
            if self._held_views():
                # Rebuilding would unmount what the user holds (a selected
                # message, selected text they may copy yet): bring the newer
                # messages back below it instead.
                await self._mount_later(len(self._later))
                return
            system = next(iter(self.query(SystemMessageView)), None)
            messages = self._earlier_and_shown_and_later()
        await self.show_messages(system.message if system else None, messages)
        self.post_message(self.PageShown(self.message_views()))

    def request_later(self) -> None:
        """Mount the next page of newer messages, unless that is already under way."""
        if self._later and not self._mounting_later:
            self._mounting_later = True
            self.run_worker(self._show_later(), group="later")

    async def _show_later(self) -> None:
        try:
            async with self._earlier_lock:
                await self._mount_later(self.PAGE)
        finally:
            self._mounting_later = False

    async def _mount_later(self, count: int) -> None:
        """Mount the next `count` newer messages below the newest one shown."""
        if not self._later:
            return
        batch = self._later[:count]
        del self._later[:count]
        marker = self.query_one(LaterMessages)
        views = [view_for(message) for message in batch]
        # Below what the user sees: nothing on screen moves.
        await self.mount_all(views, before=marker)
        if self._later:
            marker.show_count(len(self._later))
        else:
            await marker.remove()
        self.post_message(self.PageShown(views))

    @property
    def keeping_place(self) -> bool:
        """A page is being mounted above, its views still growing as they
        compose, each layout scrolling to keep the views below it in place: a
        scroll computed now, to a place in that page, may be moved (find waits
        until it has settled)."""
        return self._keeping_place

    async def _mount_earlier(self) -> None:
        if not self._earlier:
            return
        self._keeping_place = True
        try:
            await self._mount_earlier_page()
        except BaseException:
            self._stop_keeping_place()
            raise
        self.call_after_refresh(self._page_settled)

    def _page_settled(self) -> None:
        """The page is mounted and laid out, each layout having kept the place
        (`arrange`): see whether another page is needed above."""
        self._stop_keeping_place()
        self._fill_above()

    def _stop_keeping_place(self) -> None:
        self._keeping_place = False
        self._held_place = None

    async def _mount_earlier_page(self) -> None:
        batch = self._earlier[-self.PAGE :]
        del self._earlier[-self.PAGE :]
        marker = self.query_one(EarlierMessages)
        shown = self.message_views_without_system()
        oldest = shown[0] if shown else None
        if oldest is not None and oldest.virtual_region:
            self._held_place = (oldest, oldest.virtual_region.y)
        # Set aside in the same refresh as the mount: each refresh lays out
        # every mounted view again, so one is cheaper than two.
        far_below = self._far_below(shown)
        views = [view_for(message) for message in batch]
        await self.mount_all(views, after=marker)
        if self._earlier:
            marker.show_count(len(self._earlier))
        else:
            await marker.remove()
        if far_below:
            await self._set_aside_below(far_below)
        self.post_message(self.PageShown(views))

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        """Lay out the views; while a page mounts above, scroll by as much as
        it pushed the views below it down, in the same layout: what the user
        was reading stays where it was in every frame drawn. (Scrolled after
        the layout instead, one frame showed the page in its place, and the
        views grow over two or three layouts as they compose.)"""
        result = super().arrange(size, optimal)
        if self._held_place is not None:
            view, was = self._held_place
            now = next((p.region.y for p in result.placements if p.widget is view), None)
            if now is None or not view.is_attached:
                self._held_place = None
            elif now != was:
                self._held_place = (view, now)
                # What Textual does for its own anchor at this point of a
                # layout (the compositor reads the scroll offset next).
                scroll_y = max(0, self.scroll_y + now - was)
                self.set_reactive(VerticalScroll.scroll_y, scroll_y)
                self.set_reactive(VerticalScroll.scroll_target_y, scroll_y)
                self.vertical_scrollbar.position = scroll_y
        return result

    def _far_below(self, shown: list[MessageView]) -> list[MessageView]:
        """The newest of the `shown` views that begin more than KEEP_SCREENS
        screenfuls below what the user sees (none at the bottom; `_far_end`)."""
        height = self.size.height
        if not height or self.scroll_y >= self.max_scroll_y:
            return []
        return self._far_end(
            shown, above=False, bound=self.scroll_y + (1 + self.KEEP_SCREENS) * height
        )

    def _far_end(self, views: list[MessageView], *, above: bool, bound: float) -> list[MessageView]:
        """The views at one end of `views` (oldest first) that lie wholly past
        `bound`, oldest first: from the top, those that end above it (`above`);
        from the bottom, those that begin below it. The walk stops at the first
        view not laid out (mounted since the last layout) or one the user holds
        (`_held_views`) or that streams a reply: it and the views beyond it stay."""
        held = self._held_views()
        gone: list[MessageView] = []
        for view in views if above else reversed(views):
            region = view.virtual_region
            past = region.bottom <= bound if above else region.y >= bound
            if not region or not past or view in held or view.streaming:
                break
            gone.append(view)
        return gone if above else gone[::-1]

    async def _set_aside_below(self, gone: list[MessageView]) -> None:
        """Unmount `gone` (the newest views), their messages back in `_later`."""
        self._later[:0] = [view.message for view in gone]
        markers = self.query(LaterMessages)
        if markers:
            marker = markers.first()
        else:
            marker = LaterMessages(markup=False)
            await self.mount(marker, after=gone[-1])
        marker.show_count(len(self._later))
        # Pinned to the bottom, the view would follow the newest shown down.
        self.anchor(False)
        await self.remove_children(gone)

    def _held_views(self) -> set[MessageView]:
        """The views the user holds: the selected message, and those holding
        selected text (which may be copied yet)."""
        holding_text = {
            view
            for widget in self.screen.selections
            for view in widget.ancestors_with_self
            if isinstance(view, MessageView)
        }
        return holding_text | {view for view in self.message_views() if view.has_class("selected")}

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # After the frame that shows the scroll: a page mounted first would
        # hold that frame back while its views compose (about 50 ms a page).
        # Not `call_after_refresh`: it may run after a frame drawn before the
        # scroll reached the screen (the screen hears of a scroll once the view
        # is idle). Every layout drawn after this point shows the scroll.
        if new_value < old_value and new_value < self.size.height:
            self._after_scroll_drawn.add(self.request_earlier)
        if new_value > old_value and new_value > self.max_scroll_y - self.size.height:
            self._after_scroll_drawn.add(self.request_later)

    async def follow_branch(self, messages: Sequence[Message]) -> list[MessageView]:
        """Show `messages` (another branch of the conversation) where they differ
        from what is shown: views below the first difference are replaced. Returns
        the views mounted."""
        await self.show_latest()
        earlier = self._earlier
        if len(messages) < len(earlier) or any(
            a is not b for a, b in zip(earlier, messages, strict=False)
        ):
            # The branches part above what is mounted: show the new one afresh.
            system = next(iter(self.query(SystemMessageView)), None)
            await self.show_messages(system.message if system else None, messages)
            return self.message_views()
        views = self.message_views_without_system()
        shown = messages[len(earlier) :]
        same = 0
        while same < min(len(views), len(shown)) and views[same].message is shown[same]:
            same += 1
        if views[same:]:
            await self.remove_children(views[same:])
        new = [view_for(message) for message in shown[same:]]
        if new:
            await self.mount_all(new)
        return new

    async def start_reply(self, message: Message) -> AssistantMessageView:
        await self.show_latest()
        async with self._earlier_lock:
            await self._unmount_far_above()
        view = AssistantMessageView(message)
        # Streaming from its mount: its answer is composed with the first
        # paragraph the words go to (chat.ui.widgets.reply_markdown, ReplyMarkdown.compose).
        view.start_stream()
        await self.mount(view)
        # Anchoring keeps the newest tokens in sight; Textual releases the
        # anchor when the user scrolls up, and restores it at the bottom.
        self.anchor()
        return view

    async def _unmount_far_above(self) -> None:
        """Put the oldest views that end more than KEEP_SCREENS screenfuls above
        the bottom back in `_earlier` (the user is at the bottom: a message was
        just sent). A selected view, one holding selected text (the user may
        copy it yet: a regenerated reply keeps it), and the ones below them stay
        (`_far_end`)."""
        height = self.size.height
        if not height or self.scroll_y < self.max_scroll_y:
            return
        views = self.message_views_without_system()
        # Where each view was at the last layout: a view mounted since (the
        # message just sent) has an empty region, and views removed since (a
        # reply regenerated) still count in the virtual size, so the bottom is
        # that of the lowest view laid out.
        regions = [view.virtual_region for view in views]
        bottom = max((region.bottom for region in regions if region), default=0)
        gone = self._far_end(views, above=True, bound=bottom - self.KEEP_SCREENS * height)
        if not gone:
            return
        self._earlier += [view.message for view in gone]
        markers = self.query(EarlierMessages)
        if markers:
            marker = markers.first()
        else:
            marker = EarlierMessages(markup=False)
            await self.mount(marker, before=gone[0])
        marker.show_count(len(self._earlier))
        await self.remove_children(gone)

    def message_views(self) -> list[MessageView]:
        # The views are this view's children: a query would walk every widget
        # in every message (3 ms a call at the 40th reply, several calls a turn).
        return [child for child in self.children if isinstance(child, MessageView)]

    # The message the user selected (a click, alt+↑/↓): what the keys act on.

    def selected_message(self) -> Message | None:
        for view in self.message_views():
            if view.has_class("selected") and view.message.role != "system":
                return view.message
        return None

    def select(self, view: MessageView | None) -> None:
        """Select `view` (None: no message)."""
        for other in self.message_views():
            other.set_class(other is view, "selected")
        if view is not None:
            view.show_copy_button()
            view.scroll_visible(animate=False)

    def select_message(self, message: Message | None) -> None:
        self.select(next((v for v in self.message_views() if v.message is message), None))

    def select_step(self, step: int) -> None:
        """Select the message above (`step` -1) or below (+1) the selected one
        (from none, going up: the lowest in sight, the newest at the bottom);
        below the newest, none is selected."""
        views = [view for view in self.message_views() if view.message.role != "system"]
        if not views:
            return
        current = next((i for i, view in enumerate(views) if view.has_class("selected")), None)
        if current is None:
            index = self._lowest_in_sight(views) if step < 0 else None
        else:
            index = current + step
        if index is None or index >= len(views):
            self.select(None)
        else:
            self.select(views[max(0, index)])

    def _lowest_in_sight(self, views: Sequence[MessageView]) -> int:
        """The index of the lowest of `views` with a row in sight (the last if
        none is): after scrolling up or a find, the message the user sees,
        not the newest one, far below."""
        top = self.scroll_y
        bottom = top + self.scrollable_content_region.height
        for index in range(len(views) - 1, -1, -1):
            region = views[index].virtual_region
            if region.y < bottom and region.bottom > top:
                return index
        return len(views) - 1

    # What each message is, as of the last turn.

    @staticmethod
    def mark_branches(
        views: Sequence[MessageView], alternatives: Callable[[Message], list[Message]]
    ) -> None:
        """Show, on each view, which of its message's `alternatives` it is."""
        for view in views:
            if view.message.role != "system":
                siblings = alternatives(view.message)
                if len(siblings) > 1 or view.has_class("branched"):
                    position = index_of(siblings, view.message)
                    view.show_branch(position + 1, len(siblings))
                    view.add_class("branched")

    @staticmethod
    def mark_window(
        views: Sequence[MessageView], outside: Callable[[list[Message]], list[bool]]
    ) -> None:
        """Show each view's token count and whether it was `outside` the window
        (`outside` sets the counts). Only the views whose count or mark changed
        are drawn again: the meter marks them at each plan, as the user types."""
        counts = [view.message.token_count for view in views]
        states = outside([view.message for view in views])
        for view, count, is_outside in zip(views, counts, states, strict=True):
            if is_outside != view.outside_window or view.message.token_count != count:
                view.show_outside_window(is_outside)

    async def clear(self) -> None:
        self._earlier = []
        self._later = []
        await self.remove_children()
