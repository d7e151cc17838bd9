"""Tools on the chat screen: the question before a call, the calls' blocks
folded and unfolded, tools turned on and off, the tools pane.

The turn decides (chat.session.tool_turn); this asks the user and draws.
`ask` is the conversation's `ConversationTools.ask`: it shows the permission
dialog and waits for the answer; when the turn is stopped meanwhile (Esc
reaches the chat screen only once the dialog has answered, but quitting or
another conversation stop it too) the dialog goes away unanswered.
"""

from __future__ import annotations

import asyncio

from textual.screen import Screen

from chat.session.tool_loop import PermissionRequest
from chat.session.tool_turn import ConversationTools
from chat.tools.permissions import Choice
from chat.ui.screens.tool_permission import ToolPermissionScreen
from chat.ui.widgets.conversation_view import ConversationView
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.tool_call_block import ToolCallBlock, ToolSteps


class ToolFlow:
    def __init__(self, screen: Screen[None], tools: ConversationTools) -> None:
        self._screen = screen
        self.tools = tools
        tools.ask = self.ask

    async def ask(self, request: PermissionRequest) -> Choice:
        """The permission dialog for `request`; its answer."""
        answer: asyncio.Future[Choice] = asyncio.get_running_loop().create_future()

        def answered(choice: Choice | None) -> None:
            if not answer.done():
                answer.set_result(choice if choice is not None else Choice.REFUSE)

        dialog = ToolPermissionScreen(request.server, request.tool, request.arguments)
        self._screen.app.push_screen(dialog, callback=answered)
        try:
            return await answer
        finally:
            if not answer.done() or answer.cancelled():
                dialog.dismiss(None)  # the turn was stopped: the question is void

    def toggle_calls(self) -> None:
        """alt+c: unfold the tool calls of the selected reply (else of the
        newest with calls), or fold them when they all are unfolded."""
        views = [
            view
            for view in self._screen.query_one(ConversationView).message_views()
            if isinstance(view, AssistantMessageView) and view.query(ToolSteps)
        ]
        target = next((view for view in views if view.has_class("selected")), None)
        if target is None and views:
            target = views[-1]
        blocks = list(target.query(ToolCallBlock)) if target is not None else []
        if not blocks:
            self._screen.notify("No reply shown here called a tool.", severity="warning")
            return
        fold = not any(block.folded for block in blocks)
        for block in blocks:
            block.folded = fold

    def switch(self) -> str:
        """Tools on or off for this conversation: what is now so, in words."""
        tools = self.tools
        if not tools.configured:
            return (
                "No tool server is configured: add one to mcp.json in kvchat's config "
                "folder (see the README)."
            )
        tools.on = not tools.on
        if tools.on:
            return "Tools on for this conversation: the model is offered the servers' tools."
        return "Tools off for this conversation: the model is offered none."
