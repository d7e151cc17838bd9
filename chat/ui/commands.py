"""Command palette (Ctrl+P) entries offered on the chat screen: conversations and
the token view."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class ConversationCommands(Provider):
    def _commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        run = self.screen.run_action
        return [
            (
                "Open saved conversation",
                "Browse, filter, rename, delete and reopen conversations (Ctrl+O)",
                partial(run, "open_conversations"),
            ),
            (
                "Export conversation",
                "Write this conversation to a Markdown file (Ctrl+E)",
                partial(run, "export"),
            ),
            (
                "New conversation",
                "Start a new conversation (Ctrl+N)",
                partial(run, "new_conversation"),
            ),
        ]

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


class TokenViewCommands(Provider):
    """The command palette entry for the token view (on the chat screen)."""

    TITLE = "Token view"
    HELP = "Ctrl+T: the reply's tokens and the distribution each was sampled from"

    async def discover(self) -> Hits:
        yield DiscoveryHit(self.TITLE, self._open, help=self.HELP)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name in (self.TITLE, "Show token probabilities"):
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), self._open, help=self.HELP)
                return

    async def _open(self) -> None:
        await self.screen.run_action("token_view")
