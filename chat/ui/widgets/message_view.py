"""One message of the conversation: a header line and the text.

Replies are untrusted: they are shown by a `Markdown` widget (which never
interprets Rich markup) with `open_links=False`, so a link opens only after
the user confirms. The user's own text is shown as plain text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message as TextualMessage
from textual.widgets import Static

from chat.conversations.conversation import FINISH_WORDS, STATE_NOTES, Message, ReplyStats
from chat.sanitize import sanitize
from chat.ui.markdown_parser import markdown_parser
from chat.ui.widgets.code_lines import key
from chat.ui.widgets.copy_button import CopyButton
from chat.ui.widgets.sized_by_layout import SizedByTheLayout
from chat.ui.widgets.thinking_block import ThinkingBlock
from chat.ui.widgets.tool_call_block import ToolSteps
from chat.wording import counted

if TYPE_CHECKING:
    from chat.ui.widgets.reply_markdown import ReplyMarkdown

FINISH_NOTES = {**FINISH_WORDS, "done": ""}
"""A reply's header and the status bar say how a reply ended unless it ended as it should."""
NO_ANSWER = "no answer: the model ended its turn while thinking"


def reply_summary(stats: ReplyStats) -> str:
    """`212 tokens · 81.3 tok/s · first token 0.21 s · seed 42`; a reply that
    thought first also gives its answer's first token (`first answer 3.40 s`).
    A reply of one token has no rate (it said 0.0 tok/s)."""
    answer = "" if stats.first_answer_s is None else f" · first answer {stats.first_answer_s:.2f} s"
    rate = f" · {stats.decode_tps:.1f} tok/s" if stats.has_decode_rate else ""
    return (
        f"{counted(stats.generated_tokens, 'token')}{rate} · "
        f"first token {stats.ttft_s:.2f} s{answer} · seed {stats.seed}"
    )


def cache_summary(stats: ReplyStats) -> str:
    """What the KV cache saved this turn, from the engine's measured figures."""
    return (
        f"sent {stats.prompt_tokens:,} · reused from cache {stats.prompt_reused:,} · "
        f"evaluated {stats.prompt_evaluated:,} · generated {stats.generated_tokens:,}"
    )


def same_content(shown: object, text: Content) -> bool:
    """Whether a widget showing `shown` already shows `text`. Every message's
    header and branch switch are set again after each turn; an update, even
    to the same text, lays out the message and the whole conversation again
    (about 30 such layouts requested a turn at the 40th reply; docs/performance.md,
    "Headers set to what they show")."""
    return isinstance(shown, Content) and key(shown) == key(text)


class BranchSwitch(Static):
    """`‹ 2/3 ›` beside a message that has alternatives (an edited message, a
    regenerated reply): which one is shown. A click on its left half shows the
    previous one, on its right half the next."""

    DEFAULT_CSS = """
    BranchSwitch {
        width: auto;
        height: 1;
        padding: 0 0 0 1;
        color: $text-muted;
        display: none;
    }
    BranchSwitch:hover {
        color: $text;
        background: $boost;
    }
    """

    @dataclass
    class Clicked(TextualMessage):
        """Show the previous (`step` -1) or next (+1) alternative of `message`."""

        message: Message
        step: int

    def __init__(self, message: Message) -> None:
        super().__init__("", markup=False)
        self.message = message

    def show_position(self, position: int, count: int) -> None:
        """`position` is 1-based; with one alternative only, nothing is shown."""
        self.display = count > 1
        text = Content(f"‹ {position}/{count} ›")
        if not same_content(self.content, text):
            # Hidden, its text takes no room: no layout (one of the whole
            # screen at each reply's start, for a switch no one sees).
            self.update(text, layout=self.display)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        step = -1 if event.x < self.size.width / 2 else 1
        self.post_message(self.Clicked(self.message, step))


class MessageHeaderRow(SizedByTheLayout, Horizontal):
    """A message's header line: who, and for a reply its figures; the branch
    switch and the copy button beside them."""


class MessageHeader(SizedByTheLayout, Static):
    """The header's text (`MessageView.header_text`)."""


class UserMessageBody(SizedByTheLayout, Static):
    """The text of the user's message (or the system prompt), as typed."""


class MessageView(SizedByTheLayout, Vertical):
    """Base view: a header, and a body that subclasses provide."""

    @property
    def streaming(self) -> bool:
        """A reply streams into this view (from `start_stream` to `finish`)."""
        return False

    @dataclass
    class Selected(TextualMessage):
        """The user clicked `view`: it is the message the next action applies to."""

        view: MessageView

    def __init__(self, message: Message) -> None:
        super().__init__(classes=f"message {message.role}")
        self.message = message
        self.outside_window = False
        self._branch: tuple[int, int] = (1, 1)

    def compose(self) -> ComposeResult:
        with MessageHeaderRow(classes="message-header-row"):
            header = MessageHeader(self.header_text(), classes="message-header", markup=False)
            header.set_class(self.ended_early(), "ended-early")
            yield header
            switch = BranchSwitch(self.message)
            switch.show_position(*self._branch)
            yield switch

    def _content(self) -> str:
        return self.message.content

    def ended_early(self) -> bool:
        """Whether the header is a warning: the reply ended before the model finished."""
        return False

    def what(self) -> str:
        """The message in words, for "Copied the reply"."""
        return "the reply" if self.message.role == "assistant" else "your message"

    def show_branch(self, position: int, count: int) -> None:
        """Which of its alternatives this message is (1-based), of how many."""
        self._branch = (position, count)
        for switch in self.query(BranchSwitch):
            switch.show_position(position, count)

    def on_click(self) -> None:
        self.post_message(self.Selected(self))

    # `pointer-over`: the pointer is over the message or any part of it (the
    # :hover pseudo-class is only on the part right under it): the copy button
    # shows then (app.tcss). Enter and Leave bubble up from the parts.

    def on_enter(self) -> None:
        self.add_class("pointer-over")
        self.show_copy_button()

    def show_copy_button(self) -> None:
        """Mount the copy button on first need (the pointer comes over the
        message, or it is selected): opening a long conversation does not pay
        for a widget per message that most never show."""
        if self.message.role == "system" or self.query(".message-copy"):
            return
        for row in self.query(".message-header-row").results(Horizontal):  # none while removed
            row.mount(CopyButton(self._content, self.what(), classes="message-copy"))

    def on_leave(self) -> None:
        # From one part to another, the pointer is still over the message.
        self.call_later(self._follow_pointer)

    def _follow_pointer(self) -> None:
        self.set_class(self.is_mouse_over, "pointer-over")

    def header_text(self) -> Content:
        role = {"user": "You", "assistant": "Assistant", "system": "System prompt"}[
            self.message.role
        ]
        parts = [role]
        if self.message.token_count is not None:
            parts.append(counted(self.message.token_count, "token"))
        stats = self.message.stats
        if stats is not None:
            parts = [role, reply_summary(stats), cache_summary(stats)]
            note = FINISH_NOTES[stats.finish_reason]
            if note:
                parts.append(f"[{note}]")
            elif self.message.thinking and not self.message.content.strip():
                # Folded, the thinking alone looks like a reply that broke.
                parts.append(f"[{NO_ANSWER}]")
        if self.message.state != "complete":
            parts.append(f"[{STATE_NOTES[self.message.state]}]")
        if self.outside_window:
            parts.append("[outside the window: not sent]")
        return Content(" · ".join(parts))

    def show_outside_window(self, outside: bool) -> None:
        self.outside_window = outside
        self.set_class(outside, "outside-window")
        self.refresh_header()

    def refresh_header(self) -> None:
        # A view just mounted may not be composed yet (a model that finishes
        # loading while a conversation opens recounts it): compose then draws
        # the header from the same state.
        text = self.header_text()
        ended_early = self.ended_early()
        for header in self.query(".message-header").results(Static):
            if not same_content(header.content, text):
                header.update(text)
            # On the header, not the view: a class on the view restyles it and
            # everything in it (15 ms at the end of a reply of 300 tokens cut
            # short, measured), and only the header's colour depends on it.
            header.set_class(ended_early, "ended-early")


class UserMessageView(MessageView):
    def compose(self) -> ComposeResult:
        yield from super().compose()
        # sanitize: a saved or imported message may hold escape sequences.
        yield UserMessageBody(
            Content(sanitize(self.message.content)), classes="message-body", markup=False
        )
        if self.message.attachments:
            # The names only: the files' text is sent to the model, not shown.
            names = "  ".join(f"📎 {sanitize(a.name)}" for a in self.message.attachments)
            yield Static(Content(names), classes="message-attachments", markup=False)


class SystemMessageView(UserMessageView):
    """The system prompt, shown once at the top of the conversation."""


class AssistantMessageView(MessageView):
    show_thinking = False
    """Whether a reply's thinking starts unfolded (`ui.show_thinking`; the app sets it)."""

    def __init__(self, message: Message) -> None:
        super().__init__(message)
        stats = message.stats
        self.thinking = ThinkingBlock(
            message.thinking,
            stats.thinking_tokens if stats is not None else 0,
            _thinking_seconds(stats),
            folded=not self.show_thinking,
        )
        """Above the answer (held here: a streamed chunk need not look it up)."""
        from chat.ui.widgets.reply_markdown import ReplyMarkdown  # on first use: see there

        self.body: ReplyMarkdown = ReplyMarkdown(
            sanitize(message.content),
            classes="message-body",
            open_links=False,
            parser_factory=markdown_parser,
        )
        """The answer (held, as the thinking is: each delivery goes to it)."""

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield self.thinking
        if self.message.tool_steps:
            yield ToolSteps(self.message.tool_steps)
        yield self.body

    def ended_early(self) -> bool:
        return _ended_early(self.message)

    @property
    def streaming(self) -> bool:
        return self.body.streaming

    def start_stream(self) -> None:
        self.body.streaming = True  # the answer grows with each delivery, until `finish`

    async def append(self, text: str, thinking: str = "", thinking_tokens: int = 0) -> None:
        """Add streamed text (and thinking). Appended here, not through
        Textual's MarkdownStream (a task of its own): the text then reaches
        the screen in the same frame as the meter's change that came with it.
        Deliveries the screen has not drawn yet are joined before they come
        here (chat.ui.turn_drawer), as the stream would join them."""
        if thinking or thinking_tokens:
            self.thinking.add(thinking, thinking_tokens)
            await self.body.drop_first_paragraph()
        if text and self.streaming:
            block = self.thinking
            if block.thinking_now:
                block.answer_began()
            await self.body.append(text)

    async def tool_steps(self) -> ToolSteps:
        """The reply's tool steps, mounted above the answer on first need."""
        found = self.query(ToolSteps)
        if found:
            return found.first()
        steps = ToolSteps()
        await self.mount(steps, before=self.body)
        # A call before any words: the empty first paragraph's reserve would
        # stand under the call while the user decides on it.
        await self.body.drop_first_paragraph()
        return steps

    async def restart_body(self) -> None:
        """A tool step ended: its text is shown above its calls (`ToolSteps`),
        and the next step's text streams into an empty answer."""
        await self.body.update("")

    async def finish(self, text: str, stats: ReplyStats | None, thinking: str = "") -> None:
        """Stop streaming and render the final text once, in full."""
        self.body.streaming = False
        self.message.content = text
        self.message.stats = stats
        self.message.thinking = thinking
        self.thinking.finish(
            thinking, stats.thinking_tokens if stats is not None else 0, _thinking_seconds(stats)
        )
        # The answer's blocks stay when they are what the whole text builds.
        if not self.body.settle(text):
            await self.body.update(text)
        self.refresh_header()


def _thinking_seconds(stats: ReplyStats | None) -> float | None:
    """How long the reply thought: from its first token to its answer's, or to
    its end when it ended thinking (stopped, or out of tokens mid-thought)."""
    if stats is None:
        return None
    if stats.first_answer_s is not None:
        return max(0.0, stats.first_answer_s - stats.ttft_s)
    if stats.thinking_tokens and stats.total_s > stats.ttft_s:
        return stats.total_s - stats.ttft_s
    return None


def _ended_early(reply: Message) -> bool:
    """Whether the reply's header is a warning: it ended before the model finished."""
    if reply.state == "interrupted":
        return True
    return reply.stats is not None and reply.stats.finish_reason != "done"


class WaitingMessage(Vertical):
    """A message sent while the model loads: shown, not yet in the conversation.
    The chat screen sends it once the model is ready (Esc takes it back)."""

    def __init__(self, text: str) -> None:
        super().__init__(classes="message user waiting")
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(
            Content("You · waiting for the model to load… Esc takes it back"),
            classes="message-header",
            markup=False,
        )
        yield Static(Content(sanitize(self.text)), classes="message-body", markup=False)


def view_for(message: Message) -> MessageView:
    if message.role == "assistant":
        return AssistantMessageView(message)
    if message.role == "system":
        return SystemMessageView(message)
    return UserMessageView(message)
