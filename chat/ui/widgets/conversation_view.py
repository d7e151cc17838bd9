"""The scrolling conversation: one view per message, pinned to the bottom while a
reply streams unless the user scrolls up."""

from __future__ import annotations

from textual.containers import VerticalScroll

from chat.conversation import Message
from chat.ui.widgets.message_view import AssistantMessageView, MessageView, view_for


class ConversationView(VerticalScroll):
    async def add_message(self, message: Message) -> MessageView:
        view = view_for(message)
        await self.mount(view)
        self.anchor()
        return view

    async def start_reply(self, message: Message) -> AssistantMessageView:
        view = AssistantMessageView(message)
        await self.mount(view)
        view.start_stream()
        # Anchoring keeps the newest tokens in sight; Textual releases the
        # anchor when the user scrolls up, and restores it at the bottom.
        self.anchor()
        return view

    def message_views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    async def clear(self) -> None:
        await self.remove_children()
