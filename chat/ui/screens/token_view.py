"""The token view (Ctrl+T): a reply split into its tokens, and for the token
under the cursor or the mouse, the distribution the model sampled it from.

Which reply: the one whose message view holds the focus, else the one last
clicked, else the newest. P and N step to the previous and next reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widgets import Footer, Static

from chat.conversations.conversation import Message, TokenChoice, summarize
from chat.conversations.token_probs_codec import StoredTokenChoices
from chat.engine.reasoning.token_kinds import thinking_tokens
from chat.ui.screens.base import Dialog
from chat.ui.widgets.message_view import AssistantMessageView
from chat.ui.widgets.token_strip import (
    TokenDetail,
    TokenStrip,
    format_prob,
    visible_whitespace,
)

NO_PROBS = (
    "This reply has no recorded token probabilities. Either recording was off "
    "when it was generated (setting chat.record_token_probs), or it was saved by "
    "a kvchat that did not record them. Replies generated from now on with "
    "recording on can be looked at here."
)


def reply_choices(message: Message) -> tuple[list[TokenChoice], str | None]:
    """The reply's token choices, and a sentence when there are none to show."""
    probs = message.token_probs
    if probs is None:
        return [], NO_PROBS
    choices = list(probs)
    if isinstance(probs, StoredTokenChoices) and probs.problem:
        return [], f"This reply's stored token probabilities cannot be read: {probs.problem}."
    if not choices:
        return [], "This reply has no tokens."
    return choices, None


def summary_text(choices: Sequence[TokenChoice]) -> Content:
    summary = summarize(list(choices))
    parts: list[Content | str | tuple[str, str]] = [
        f"{summary.tokens:,} tokens · mean probability {format_prob(summary.mean_prob)}"
    ]
    least = summary.least_likely
    if least is not None:
        position = next(i for i, c in enumerate(choices) if c is least)
        parts += [
            " · least likely chosen: ",
            (f"“{visible_whitespace(least.text)}”", "bold"),
            f" {format_prob(least.prob)} (token {position + 1}; U goes there)",
        ]
    parts.append(f" · {summary.not_greedy:,} sampled outside the greedy choice")
    return Content.assemble(*parts)


class TokenViewScreen(Dialog[None]):
    CSS_PATH = "token_view.tcss"

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("ctrl+t", "close", "Close token view"),
        Binding("p", "reply(-1)", "Previous reply"),
        Binding("n", "reply(1)", "Next reply"),
        Binding("u", "least_likely", "Least likely token"),
    ]

    def __init__(self, replies: Sequence[Message], index: int) -> None:
        super().__init__()
        self.replies = list(replies)
        self.index = index
        self.choices: list[TokenChoice] = []
        self.thinking: list[bool] = []
        """Which of the reply's tokens are its thinking (marked in the strip)."""

    @property
    def message(self) -> Message:
        return self.replies[self.index]

    def compose(self) -> ComposeResult:
        choices, problem = reply_choices(self.message)
        self.choices = choices
        with Vertical(id="token-dialog") as dialog:
            dialog.border_title = f"Token view · reply {self.index + 1} of {len(self.replies)}"
            dialog.border_subtitle = "←→↑↓ Home End or mouse: token · P/N: reply · Esc: close"
            if problem is not None:
                yield Static(Content(problem), id="token-problem", markup=False)
            else:
                yield Static(summary_text(choices), id="token-summary", markup=False)
                texts = [c.text for c in choices]
                message = self.message
                self.thinking = thinking_tokens(texts, bool(message.thinking))
                # The answer's tokens spell the reply's text (the thinking's, with
                # its markers, are shown marked).
                answer = (t for t, thought in zip(texts, self.thinking, strict=True) if not thought)
                if "".join(answer).lstrip() != message.content.lstrip():
                    yield Static(
                        Content(
                            "The tokens' texts differ from the reply's text: a stop "
                            "sequence was cut off the reply, or a character was split "
                            "across tokens (shown as �)."
                        ),
                        id="token-note",
                        markup=False,
                    )
                yield TokenStrip(
                    texts,
                    [not c.greedy for c in choices],
                    thinking=self.thinking,
                    id="token-strip",
                )
                yield TokenDetail(id="token-detail")
        yield Footer()

    def on_mount(self) -> None:
        self._after_compose()

    def _after_compose(self) -> None:
        if self.choices:
            self.show_token(0)
            self.query_one(TokenStrip).focus()

    @property
    def strip(self) -> TokenStrip:
        return self.query_one(TokenStrip)

    def show_token(self, index: int) -> None:
        if 0 <= index < len(self.choices):
            thinking = index < len(self.thinking) and self.thinking[index]
            detail = self.query_one(TokenDetail)
            detail.show(self.choices[index], index, len(self.choices), thinking)

    @on(TokenStrip.Shown)
    def _on_shown(self, event: TokenStrip.Shown) -> None:
        self.show_token(event.index)

    def action_close(self) -> None:
        self.dismiss(None)

    async def action_reply(self, delta: int) -> None:
        index = self.index + delta
        if not 0 <= index < len(self.replies):
            self.notify(
                "This is the first reply." if delta < 0 else "This is the newest reply.",
                timeout=2,
            )
            return
        self.index = index
        await self.recompose()
        self._after_compose()

    def action_least_likely(self) -> None:
        least = summarize(self.choices).least_likely
        if least is not None:
            self.strip.cursor = next(i for i, c in enumerate(self.choices) if c is least)


def _selected_view(screen: Screen[Any]) -> AssistantMessageView | None:
    """The reply view that holds the focus, else the one last clicked."""
    node: DOMNode | None = screen.focused
    while node is not None:
        if isinstance(node, AssistantMessageView):
            return node
        node = node.parent
    selected = screen.query(".selected").results(AssistantMessageView)
    return next(iter(selected), None)


def open_token_view(screen: Screen[Any], messages: Sequence[Message]) -> None:
    """Show the token view of the selected reply (see the module docstring)."""
    replies = [m for m in messages if m.role == "assistant"]
    view = _selected_view(screen)
    if view is not None:
        for selected in screen.query(".selected").results(AssistantMessageView):
            selected.set_class(False, "selected")  # used once: next time, the newest
        if not any(m is view.message for m in replies):
            screen.notify(
                "That reply is still being generated: look at its tokens once it is done.",
                severity="warning",
            )
            return
        index = next(i for i, m in enumerate(replies) if m is view.message)
    elif replies:
        index = len(replies) - 1
    else:
        screen.notify("There is no reply yet whose tokens could be shown.", severity="warning")
        return
    screen.app.push_screen(TokenViewScreen(replies, index))
