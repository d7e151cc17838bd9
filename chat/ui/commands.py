"""Command palette (Ctrl+P) entries: conversations, the token view and the seed
on the chat screen, presets, kvchat's themes; and `ListedCommands`, the shape
every kvchat palette provider has."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

from chat.sanitize import sanitize_line
from chat.session.thinking_controls import BUDGETS
from chat.settings.presets import Preset
from chat.ui.clipboard import CodeBlock
from chat.ui.themes import KvchatTheme


@dataclass(frozen=True)
class PaletteEntry:
    name: str
    help: str
    run: Callable[[], object]
    other_names: tuple[str, ...] = ()
    """Other wordings a search also finds the entry by."""


class ListedCommands(Provider):
    """A provider with a fixed list of entries: the empty palette lists them all;
    a search offers each entry whose name (or other wording) matches, showing the
    words that matched."""

    def entries(self) -> Sequence[PaletteEntry]:
        raise NotImplementedError

    def _safe_entries(self) -> Iterator[PaletteEntry]:
        # Names and help may quote a theme's or a preset's file, and the
        # palette reads them as markup: for every list, here, they lose escape
        # sequences and their brackets are escaped.
        def safe(text: str) -> str:
            return escape(sanitize_line(text))

        for entry in self.entries():
            yield PaletteEntry(
                safe(entry.name),
                safe(entry.help),
                entry.run,
                tuple(safe(name) for name in entry.other_names),
            )

    async def discover(self) -> Hits:
        for entry in self._safe_entries():
            yield DiscoveryHit(entry.name, entry.run, help=entry.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in self._safe_entries():
            for words in (entry.name, *entry.other_names):
                score = matcher.match(words)
                if score > 0:
                    yield Hit(score, matcher.highlight(words), entry.run, help=entry.help)
                    break


@dataclass(frozen=True)
class ScreenAction:
    """A palette entry that runs one of the screen's actions."""

    name: str
    help: str
    action: str
    other_names: tuple[str, ...] = ()


CHAT_SCREEN_ACTIONS = (
    ScreenAction(
        "Open saved conversation",
        "Browse, filter, rename, delete and reopen conversations (Ctrl+O)",
        "open_conversations",
    ),
    ScreenAction(
        "Export conversation",
        "Write this conversation to a Markdown file (Ctrl+E)",
        "export",
    ),
    ScreenAction("New conversation", "Start a new conversation (Ctrl+N)", "new_conversation"),
    ScreenAction(
        "Token view",
        "Ctrl+T: the reply's tokens and the distribution each was sampled from",
        "token_view",
        other_names=("Show token probabilities",),
    ),
    ScreenAction(
        "Edit message",
        "F3: edit the selected message (else your last) as a new branch; the original is kept",
        "edit_message",
        other_names=("Edit reply",),
    ),
    ScreenAction(
        "Regenerate reply",
        "Ctrl+R: a new reply in place of the selected one (else the last); the old one is kept",
        "regenerate",
    ),
    ScreenAction(
        "Continue the last reply",
        "Ctrl+L: the reply cut short (max tokens, Esc, a dropped connection) goes on in "
        "the same message",
        "continue_reply",
        other_names=("Continue reply", "Go on"),
    ),
    ScreenAction(
        "Previous alternative",
        "alt+←: show the previous version of the selected message (else the newest with versions)",
        "switch_branch(-1)",
        other_names=("Previous branch",),
    ),
    ScreenAction(
        "Next alternative",
        "alt+→: show the next version of the selected message (else the newest with versions)",
        "switch_branch(1)",
        other_names=("Next branch",),
    ),
    ScreenAction(
        "Fork conversation here",
        "F4: the branch shown, up to the selected message, becomes a new conversation",
        "fork",
    ),
    ScreenAction(
        "Select previous message",
        "alt+↑ (alt+↓: next): the message that edit, regenerate, fork and alt+←/→ apply to",
        "select_message(-1)",
    ),
    ScreenAction(
        "Switch model",
        "F8: every GGUF on this machine (Hugging Face, LM Studio, Ollama...), what each "
        "needs in memory; download one",
        "pick_model",
        other_names=("Models", "Download model"),
    ),
    ScreenAction(
        "Copy message",
        "F5: copy the selected message (else the last reply) to the clipboard",
        "copy_message",
        other_names=("Copy reply",),
    ),
    ScreenAction(
        "Find in the conversation",
        "Ctrl+F: highlight a text in the messages shown; Enter/↑ earlier match, ↓ later",
        "find",
        other_names=("Search the conversation",),
    ),
    ScreenAction(
        "Attach a file…",
        "Attach a text file to the message you are writing (or type @path in the box; "
        "Tab completes)",
        "attach_file",
        other_names=("Attach text file", "Add file"),
    ),
    ScreenAction(
        "Remove attachments",
        "Take every attached file off the message you are writing",
        "remove_attachments",
        other_names=("Detach files",),
    ),
    ScreenAction(
        "Compose in editor",
        "Ctrl+G: write the message in your editor ($VISUAL or $EDITOR)",
        "compose_in_editor",
        other_names=("Open editor",),
    ),
    ScreenAction(
        "Why the whole conversation is sent again",
        "F1: how the context window and the KV cache work",
        "context_help",
        other_names=("Help",),
    ),
    ScreenAction(
        "Choose preset",
        "F9: a system prompt with sampling settings (a persona) for this conversation",
        "choose_preset",
        other_names=("Persona",),
    ),
    ScreenAction(
        "Pin last seed",
        "Use the last reply's seed for every reply: the same prompt then gives the same reply",
        "pin_seed",
    ),
    ScreenAction(
        "Random seed each reply", "Unpin the seed: each reply gets a new one", "random_seed"
    ),
    ScreenAction(
        "Show or hide thinking",
        "alt+t: unfold or fold a reasoning model's thinking (the selected reply's, else "
        "the newest)",
        "toggle_thinking",
        other_names=("Reasoning", "Thoughts"),
    ),
    ScreenAction(
        "Turn thinking on or off",
        "A reasoning model thinks before it answers, or not, in this conversation "
        "(where its template or server can turn it off)",
        "switch_thinking",
        other_names=("Reasoning on or off", "No thinking", "enable_thinking"),
    ),
    ScreenAction(
        "Thinking budget: no limit",
        "A reasoning model thinks as long as it wants, in this conversation",
        "thinking_budget(0)",
        other_names=("Reasoning budget: no limit",),
    ),
    *(
        ScreenAction(
            f"Thinking budget: {budget:,} tokens",
            f"A reasoning model's thinking is closed after {budget:,} tokens and it answers, "
            "in this conversation",
            f"thinking_budget({budget})",
            other_names=(f"Reasoning budget: {budget:,} tokens",),
        )
        for budget in BUDGETS
    ),
    ScreenAction(
        "Tools",
        "The tool servers (MCP), their state and tools, on or off for this conversation; "
        "the tools always allowed, to take back",
        "tools_pane",
        other_names=("Tool servers", "MCP servers", "Tool permissions"),
    ),
    ScreenAction(
        "Turn tools on or off",
        "The model is offered the tool servers' tools in this conversation, or none",
        "switch_tools",
        other_names=("Tools on or off", "Disable tools", "Enable tools"),
    ),
    ScreenAction(
        "Show or hide tool calls",
        "alt+c: unfold or fold a reply's tool calls and their results (the selected "
        "reply's, else the newest)",
        "toggle_tool_calls",
        other_names=("Tool results", "Unfold tool calls"),
    ),
)


class ChatScreenCommands(ListedCommands):
    """The chat screen's own entries: conversations, the token view, the seed."""

    def entries(self) -> list[PaletteEntry]:
        run = self.screen.run_action
        entries = [
            PaletteEntry(item.name, item.help, partial(run, item.action), item.other_names)
            for item in CHAT_SCREEN_ACTIONS
        ]
        # One entry per code block of the selected reply (else the last one).
        blocks: list[CodeBlock] = getattr(self.screen, "code_blocks_to_copy", list)()
        for index, block in enumerate(blocks):
            entries.append(
                PaletteEntry(
                    f"Copy code block {index + 1}",
                    f"{block.describe()} · from the selected reply, else the last",
                    partial(run, f"copy_code({index})"),
                )
            )
        return entries


class PresetCommands(ListedCommands):
    """ "Use preset: NAME" for each of the screen's `presets`, with what it is and
    changes; choosing one calls the screen's `use_preset(name)`."""

    def entries(self) -> list[PaletteEntry]:
        screen = self.screen
        presets: list[Preset] = getattr(screen, "presets", [])
        use = getattr(screen, "use_preset", None)
        if use is None:
            return []
        in_use: str = getattr(screen, "preset_in_use", "")
        entries: list[PaletteEntry] = []
        for preset in presets:
            notes = [preset.description, preset.summary()]
            if not preset.builtin:
                notes.append(f"yours: {preset.path}")
            if preset.name == in_use:
                notes.append("in use")
            help_text = " · ".join(note for note in notes if note)
            name = f"Use preset: {preset.name}"
            entries.append(PaletteEntry(name, help_text, partial(use, preset.name), (preset.name,)))
        return entries


class ThemeCommands(ListedCommands):
    """The command palette's theme list: kvchat's themes in their own order
    (the default first, user themes last), each with its description."""

    def entries(self) -> list[PaletteEntry]:
        app = self.app
        entries: list[PaletteEntry] = []
        for theme in app.available_themes.values():
            mode = "dark" if theme.dark else "light"
            description = theme.description if isinstance(theme, KvchatTheme) else ""
            help_text = f"{mode} · {description}" if description else mode
            if theme.name == app.theme:
                help_text += " · in use"
            select = partial(setattr, app, "theme", theme.name)
            entries.append(PaletteEntry(theme.name, help_text, select))
        return entries
