"""The tools pane: each tool server, its state and its tools, turned on and
off for this conversation, and the lasting permission answers, which can be
taken back.

Names, descriptions and problems come from the servers: untrusted text,
drawn as `Content` after `chat.sanitize`. The pane changes the
conversation's `ConversationTools` (chat.session.tool_turn) and the
permissions (chat.tools.permissions), then calls `changed` so the chat
screen's meter counts what the next reply is offered.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Button, Label, OptionList, Static
from textual.widgets.option_list import Option

from chat.errors import KvchatError
from chat.sanitize import sanitize_line
from chat.session.tool_turn import ConversationTools
from chat.tools.permissions import Grant
from chat.tools.status import ServerState
from chat.ui.screens.base import Dialog
from chat.ui.screens.dialogs import DIALOG_CSS
from chat.wording import counted

DESCRIPTION_CHARS = 50
"""Characters of a tool's description shown beside its name."""
PROBLEM_CHARS = 400
"""A failed server's reason is shown whole (the list wraps it); a longer one
(its last words on stderr) is cut here."""


def _short(text: str, limit: int) -> str:
    line = sanitize_line(" ".join(text.split()))
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ToolsScreen(Dialog[None]):
    DEFAULT_CSS = (
        "ToolsScreen { align: center middle; }"
        + DIALOG_CSS
        + """
    ToolsScreen .dialog { width: 100; max-height: 100%; }
    ToolsScreen .dialog-text { margin: 0; }
    ToolsScreen #tool-servers { height: auto; max-height: 16; }
    ToolsScreen #tool-grants { height: auto; max-height: 6; }
    ToolsScreen .tools-heading { margin-top: 1; text-style: bold; }
    """
    )
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("a", "switch_all", "Tools on/off"),
    ]

    def __init__(
        self,
        tools: ConversationTools,
        changed: Callable[[], object],
        cannot_call: str | None = None,
    ) -> None:
        """`cannot_call`: why the model in use takes no tools (Turn.why_no_tools)."""
        super().__init__()
        self._tools = tools
        self._changed = changed
        self._cannot_call = cannot_call
        self._rows: list[tuple[str, str | None]] = []
        """Each row of the server list: (server, tool or None for the server)."""
        self._grants: list[Grant] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Tools", classes="dialog-title")
            yield Static("", id="tools-state", classes="dialog-text", markup=False)
            yield Label(
                "Servers and tools (Enter turns one on or off for this conversation)",
                classes="tools-heading",
            )
            yield OptionList(id="tool-servers")
            yield Label("Always allowed (Enter takes it back)", classes="tools-heading")
            yield OptionList(id="tool-grants")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Tools on/off (a)", id="switch-all")
                yield Button("Close", id="close", variant="primary")

    def on_mount(self) -> None:
        self.show_servers()
        self.query_one("#tool-servers", OptionList).focus()

    def show_servers(self) -> None:
        """Draw the servers, their tools and the lasting answers as they are now."""
        tools = self._tools
        if not tools.configured:
            state = (
                "No tool server is configured: add one to mcp.json in kvchat's config "
                "folder (see the README)."
            )
        elif tools.on and self._cannot_call is not None:
            state = f"On for this conversation, but none is offered. {self._cannot_call}"
        elif tools.on:
            offered = len(tools.offered())
            state = f"On for this conversation: {counted(offered, 'tool')} offered to the model."
        else:
            state = "Off for this conversation: the model is offered no tools."
        self.query_one("#tools-state", Static).update(Content(state))
        servers = self.query_one("#tool-servers", OptionList)
        highlighted = servers.highlighted
        servers.clear_options()
        self._rows = []
        for name, status in tools.caller.servers.items():
            server_on = name not in tools.servers_off
            what = [status.state.value]
            if status.state is ServerState.READY:
                what.append(counted(len(status.tools), "tool"))
            elif status.problem:  # whole: it names the command, the variable, the last words
                what.append(_short(status.problem, PROBLEM_CHARS))
            line = f"{'[on] ' if server_on else '[off]'} {sanitize_line(name)} · {' · '.join(what)}"
            servers.add_option(Option(Content(line)))
            self._rows.append((name, None))
            for tool in status.tools:
                tool_on = server_on and tools.enabled(name, tool.name)
                mark = "[on] " if tool_on else "[off]"
                note = tool.problem if tool.problem else tool.description
                text = f"    {mark} {sanitize_line(tool.name)}"
                if note:
                    unusable = "unusable: " if tool.problem else ""
                    text += f" · {unusable}{_short(note, DESCRIPTION_CHARS)}"
                servers.add_option(Option(Content(text)))
                self._rows.append((name, tool.name))
        if self._rows:  # a row is highlighted from the start: Enter acts on it
            servers.highlighted = (
                0 if highlighted is None else min(highlighted, len(self._rows) - 1)
            )
        grants = self.query_one("#tool-grants", OptionList)
        grants.clear_options()
        self._grants = tools.permissions.lasting()
        for grant in self._grants:
            grants.add_option(Option(Content(sanitize_line(grant.describe()))))
        if not self._grants:
            grants.add_option(Option(Content("none"), disabled=True))
        else:
            grants.highlighted = 0

    @on(OptionList.OptionSelected, "#tool-servers")
    def _switch_row(self, event: OptionList.OptionSelected) -> None:
        server, tool = self._rows[event.option_index]
        tools = self._tools
        if tool is None:
            tools.servers_off ^= {server}
        elif server in tools.servers_off:  # its switch would change out of sight
            self.notify(
                f"The server '{sanitize_line(server)}' is off for this conversation: "
                "turn it on first (Enter on its row).",
                markup=False,
                timeout=6,
            )
            return
        else:
            tools.tools_off ^= {(server, tool)}
        self._after_change()

    @on(OptionList.OptionSelected, "#tool-grants")
    def _revoke(self, event: OptionList.OptionSelected) -> None:
        if event.option_index >= len(self._grants):
            return
        grant = self._grants[event.option_index]
        try:
            self._tools.permissions.revoke(grant)
        except KvchatError as error:
            self.notify(str(error), severity="error", markup=False)
            return
        self.notify(f"Taken back: {sanitize_line(grant.describe())}.", markup=False, timeout=6)
        self.show_servers()

    @on(Button.Pressed, "#switch-all")
    def action_switch_all(self) -> None:
        if self._tools.configured:
            self._tools.on = not self._tools.on
            self._after_change()

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss(None)

    def _after_change(self) -> None:
        self.show_servers()
        self._changed()
