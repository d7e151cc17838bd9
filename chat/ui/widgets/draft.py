"""The message being written: the prompt box, the strip of files attached to
it, the banner shown while one of the user's messages is edited, and the
user's own editor (Ctrl+G).

It posts `Submitted` with the text (and the message being edited, if one
is); the chat screen hands that to the turn, and calls back `sent` or
`edit_sent` once it went. The files attached are the turn's
`DraftAttachments` (chat.session.draft_attachments): what is sent with the
text is decided there; here they are picked, shown and taken off.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalGroup
from textual.content import Content
from textual.message import Message as TextualMessage
from textual.widgets import Static

from chat.conversations.attachments import Attachment, AttachmentError
from chat.conversations.conversation import Message
from chat.session.draft_attachments import without_mention
from chat.session.turn import Turn
from chat.ui.widgets.attachment_strip import AttachmentChip, AttachmentStrip
from chat.ui.widgets.prompt_box import PromptBox

EDITING = "Editing your message: Enter sends it as a new branch, the original is kept · Esc cancels"


class Draft(VerticalGroup):
    @dataclass
    class Submitted(TextualMessage):
        """Enter over `text`; `editing`: the user's message it is an edit of."""

        text: str
        editing: Message | None

    class AttachmentsChanged(TextualMessage):
        """A file was attached or taken off: the meter counts again."""

    def __init__(self, turn: Turn) -> None:
        super().__init__()
        self._turn = turn
        self._editing: tuple[Message, str] | None = None
        """The message being edited in the prompt box, and the draft it replaced there."""
        self._picked_before_edit: list[Attachment] = []
        """The draft's picked files while a message of yours is edited."""
        self._submitted = ""
        """The box's text when Enter was last pressed over it."""

    @property
    def editing(self) -> Message | None:
        """The user's message being edited, if one is."""
        return self._editing[0] if self._editing is not None else None

    @staticmethod
    def parts() -> ComposeResult:
        """Its widgets, composed by the screen inside it (`with Draft(turn):`),
        so that they are mounted with the screen's own: the screen's first
        frame, and its `on_mount`, find the prompt box."""
        banner = Static("", id="editing", markup=False)
        banner.display = False  # until a message is edited
        yield banner
        yield AttachmentStrip(id="attachments")
        yield PromptBox(id="prompt")

    @property
    def _box(self) -> PromptBox:
        return self.query_one(PromptBox)

    def _set_text(self, text: str) -> None:
        box = self._box
        box.text = text
        box.move_cursor(box.document.end)

    @on(PromptBox.Submitted)
    def _on_box_submitted(self, event: PromptBox.Submitted) -> None:
        event.stop()
        self._submitted = event.text
        self.post_message(self.Submitted(event.text.strip("\n"), self.editing))

    # After the turn took the text.

    def sent(self) -> None:
        """The message went (or waits for the model): the box is emptied of
        it, and keeps what was typed after the Enter."""
        typed = self._typed_after_submit()
        if typed:
            self._set_text(typed)
        else:
            self._box.clear()

    def edit_sent(self) -> None:
        """The edit went as a new branch: the draft the box held before comes
        back (with what was typed after the Enter, on a line of its own)."""
        assert self._editing is not None
        typed = self._typed_after_submit()
        _, draft = self._editing
        self._editing = None
        self._turn.draft.picked = self._picked_before_edit
        self.query_one("#editing").display = False
        self._set_text(f"{draft}\n{typed}" if draft.strip() and typed else draft + typed)

    def _typed_after_submit(self) -> str:
        """What went into the box between the Enter and the turn taking the
        message: keys read from the terminal with the Enter (typed fast, or
        over a slow link) come in before the screen hears of it. Only text
        added in one place is recognised; anything else is given up, as the
        box was emptied before."""
        submitted, self._submitted = self._submitted, ""
        text = self._box.text
        added = len(text) - len(submitted)
        if added <= 0:
            return ""
        start = 0
        while start < len(submitted) and text[start] == submitted[start]:
            start += 1
        if text[start + added :] != submitted[start:]:
            return ""
        return text[start : start + added]

    def unsent(self) -> str:
        """What is written and not sent ("" for nothing): the box's text, and
        the draft set aside while a message of yours is edited (the edit
        itself only if it was changed)."""
        text = self._box.text
        if self._editing is None:
            return text if text.strip() else ""
        message, draft = self._editing
        edited = text if text.strip() and text != message.content else ""
        return "\n".join(part for part in (draft, edited) if part.strip())

    def put_back(self, text: str) -> None:
        """A message not sent comes back into the box, above anything typed
        since: nothing is lost."""
        typed = self._box.text
        self._set_text(f"{text}\n{typed}" if typed.strip() else text)

    def put_back_sent(self, message: Message) -> None:
        """A message taken out of the conversation (it did not fit, or the
        server failed) comes back with its files, unless the box holds text."""
        box = self._box
        if not box.text.strip():
            box.text = message.content
            self._turn.draft.put_back(message.attachments, message.content)

    # Editing one of the user's messages.

    def edit(self, message: Message) -> None:
        """Edit `message` in the box, to send it as a new branch."""
        box = self._box
        draft = self._editing[1] if self._editing is not None else box.text
        attachments = self._turn.draft
        if self._editing is None:
            self._picked_before_edit = attachments.picked
        # The message's own files come with it (those its text names come again).
        attachments.picked = []
        attachments.put_back(message.attachments, message.content)
        self._editing = (message, draft)
        self._set_text(message.content)
        box.focus()
        banner = self.query_one("#editing", Static)
        banner.update(Content(EDITING))
        banner.display = True

    def stop_editing(self) -> None:
        """Stop editing: the draft the box held before comes back."""
        if self._editing is None:
            return
        _, draft = self._editing
        self._editing = None
        self._turn.draft.picked = self._picked_before_edit
        self.query_one("#editing").display = False
        self.screen.refresh_bindings()
        self._set_text(draft)

    # Files: `@path` in the text, or picked.

    def attach(self, path: str) -> None:
        """Attach the file at `path` (chosen in the file picker)."""
        try:
            attachment = self._turn.draft.pick(path)
        except AttachmentError as error:
            self.notify(str(error), title="Cannot attach", severity="error")
            return
        self.notify(f"Attached {attachment.name}")
        self.post_message(self.AttachmentsChanged())
        self._box.focus()

    @on(AttachmentChip.Removed)
    def _on_attachment_removed(self, event: AttachmentChip.Removed) -> None:
        """A click on an attachment takes it off: a picked file is dropped, a
        file named with `@` loses the `@` (its name stays, as text)."""
        event.stop()
        self._turn.draft.remove(event.attachment)
        text = without_mention(self._box.text, event.attachment.name)
        if text != self._box.text:
            self._set_text(text)
        self.post_message(self.AttachmentsChanged())

    def remove_attachments(self) -> None:
        """Take every file off the message being written."""
        attachments = self._turn.draft
        text = self._box.text
        attached = attachments.resolve(text)
        if not attached.attachments:
            self.notify("No file is attached to the message.", severity="warning")
            return
        attachments.clear()
        for name in attached.mentioned:
            text = without_mention(text, name)
        if text != self._box.text:
            self._set_text(text)
        self.post_message(self.AttachmentsChanged())

    def compose_in_editor(self) -> None:
        """Write the message in the user's editor; its text comes back to the
        prompt box (unchanged if the editor fails)."""
        from textual.app import SuspendNotSupported

        from chat.ui.editor import EditorError, edit_text

        box = self._box
        try:
            with self.app.suspend():
                text = edit_text(box.text)
        except SuspendNotSupported:
            self.notify(
                "An editor cannot be opened from here (this terminal cannot be handed over).",
                severity="warning",
            )
            return
        except EditorError as error:
            self.notify(str(error), severity="error", timeout=10)
            return
        self._set_text(text)
        box.focus()
