"""The files attached to the message being written, above the prompt box:
`📎 notes.txt · 312 tokens ✕` for each (a click removes it), and a warning
for a file named with `@` that cannot be attached. Hidden when there is
neither. File names are untrusted: shown as plain text, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.containers import HorizontalGroup
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from chat.conversations.attachments import Attachment
from chat.ui import untrusted
from chat.wording import counted


def _chip_text(attachment: Attachment, tokens: int | None) -> Content:
    count = "" if tokens is None else f" · {counted(tokens, 'token')}"
    return untrusted.shown_line(f"📎 {attachment.name}{count} ✕")


class AttachmentChip(Static):
    """One attachment: its name and token count; a click removes it."""

    @dataclass
    class Removed(Message):
        """The user clicked `attachment` off the message being written."""

        attachment: Attachment

    def __init__(self, attachment: Attachment, tokens: int | None) -> None:
        super().__init__(_chip_text(attachment, tokens), markup=False, classes="attachment")
        self.attachment = attachment
        self.tooltip = "Click to remove this attachment"

    def show_tokens(self, tokens: int | None) -> None:
        self.update(_chip_text(self.attachment, tokens))

    def on_click(self) -> None:
        self.post_message(self.Removed(self.attachment))


class AttachmentStrip(HorizontalGroup):
    DEFAULT_CSS = """
    AttachmentStrip {
        height: auto;
        margin: 0 1;
        display: none;
    }
    AttachmentStrip .attachment {
        width: auto;
        margin-right: 2;
        color: $text-accent;
    }
    AttachmentStrip .attachment:hover {
        background: $boost;
    }
    AttachmentStrip .attachment-problem {
        width: auto;
        color: $text-warning;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[object, ...] = ()

    async def show(
        self, attachments: Sequence[tuple[Attachment, int | None]], problems: Sequence[str]
    ) -> None:
        """Show each attachment with its token count (None: not counted yet)
        and each problem."""
        shown = (tuple(attachments), tuple(problems))
        if shown == self._shown:
            return  # unchanged: called at every pause in typing
        previous, self._shown = self._shown, shown
        chips = list(self.query(AttachmentChip))
        if (
            previous
            and previous[1] == shown[1]
            and [chip.attachment for chip in chips] == [attachment for attachment, _ in attachments]
        ):
            # The same files, counted since: the chips stay (one being clicked
            # must not be replaced under the pointer).
            for chip, (_, tokens) in zip(chips, attachments, strict=True):
                chip.show_tokens(tokens)
            return
        await self.remove_children()
        await self.mount_all(
            [AttachmentChip(attachment, tokens) for attachment, tokens in attachments]
            + [
                Static(untrusted.shown(f"⚠ {problem}"), markup=False, classes="attachment-problem")
                for problem in problems
            ]
        )
        self.display = bool(attachments or problems)
