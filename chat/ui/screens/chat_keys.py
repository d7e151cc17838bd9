"""The chat screen's keys (chat.ui.screens.chat), in the order the footer
and the help screen (F1) list them."""

from __future__ import annotations

from textual.binding import Binding, BindingType

CHAT_KEYS: list[BindingType] = [
    Binding("escape", "stop", "Stop"),
    Binding("ctrl+r", "regenerate", "Regen", tooltip="Regenerate the last reply"),
    Binding("ctrl+n", "new_conversation", "New", tooltip="New conversation"),
    Binding("ctrl+o", "open_conversations", "Open"),
    # priority: in the prompt box, Ctrl+E would otherwise move to the end of the line.
    Binding("ctrl+e", "export", "Export", priority=True),
    Binding(
        "f1",
        "context_help",
        "Help",
        tooltip="Every key and every figure of the status bar",
        show=False,
    ),
    Binding("ctrl+t", "token_view", "Tokens"),
    # Function keys, not alt+letter: terminals send alt+f as ESC f, which
    # Textual reads as ctrl+right (Emacs' word forward).
    Binding("f3", "edit_message", "Edit", tooltip="Edit a message as a new branch"),
    Binding(
        "alt+left",
        "switch_branch(-1)",
        "Branch",
        key_display="alt+←→",
        tooltip="Show the previous or next alternative of a message",
    ),
    # No description: alt+left's line ("alt+←→") tells of both.
    Binding("alt+right", "switch_branch(1)", "", show=False),
    Binding("alt+up", "select_message(-1)", "Select previous message", show=False),
    Binding("alt+down", "select_message(1)", "Select next message", show=False),
    Binding("f4", "fork", "Fork here", show=False),
    Binding(
        "f5", "copy_message", "Copy", tooltip="Copy the selected message (else the last reply)"
    ),
    Binding("f8", "pick_model", "Models", tooltip="Switch model, or download one", show=False),
    # Not F6/F7: the prompt box (a TextArea) takes those to select text.
    Binding(
        "ctrl+l",
        "continue_reply",
        "Continue",
        tooltip="Continue the last reply where it was cut short (L: longer)",
        show=False,
    ),
    Binding(
        "ctrl+g",
        "compose_in_editor",
        "Editor",
        tooltip="Write the message in $VISUAL/$EDITOR",
        show=False,
    ),
    Binding("f9", "choose_preset", "Preset", tooltip="A persona for this conversation", show=False),
    Binding("ctrl+f", "find", "Find", tooltip="Find in the conversation", show=False),
    Binding(
        "alt+t",
        "toggle_thinking",
        "Thinking",
        tooltip="Unfold or fold a reasoning model's thinking",
        show=False,
    ),
]

TOOL_CALLS_KEY = (
    "alt+c",
    "toggle_tool_calls",
    "Unfold or fold a reply's tool calls and their results",
)
"""Bound only when tool servers are configured (`ChatScreen.on_mount`): without
them no reply calls a tool, and the key would do nothing."""
