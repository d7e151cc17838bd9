"""Attaching text files: reading (and refusing) files, what the model is sent,
`@path` in the draft and its completion, saving, reloading and exporting."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from chat.conversations import attachments
from chat.conversations.attachments import (
    MAX_ATTACHMENT_BYTES,
    Attachment,
    AttachmentError,
    attachment_block,
    prompt_text,
    read_attachment,
)
from chat.conversations.conversation import Conversation, Message
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.transcript import parse_import, to_json, to_markdown
from chat.safe_files import UnsafeFileError
from chat.session.draft_attachments import (
    DraftAttachments,
    complete_path,
    find_mentions,
    mention_before,
    without_mention,
)
from tests.conversations.conftest import old_database

# --- reading a file ---------------------------------------------------------------


def test_reads_utf8_text_with_unix_line_endings(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_bytes("\ufeffcafé\r\nline two\r\n".encode())
    attachment = read_attachment("notes.txt", tmp_path)
    assert attachment == Attachment("notes.txt", "café\nline two\n")


def test_expands_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "plan.md").write_text("# Plan\n")
    assert read_attachment("~/plan.md", Path("/")).text == "# Plan\n"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"PK\x03\x04\x00\x00binary", r"not a text file \(it holds binary data\)"),
        (b"caf\xe9 latin-1", "not UTF-8 text"),
    ],
    ids=["nul-bytes", "not-utf8"],
)
def test_refuses_binary_files(tmp_path: Path, content: bytes, says: str) -> None:
    (tmp_path / "file.bin").write_bytes(content)
    with pytest.raises(AttachmentError, match=says):
        read_attachment("file.bin", tmp_path)


def test_refuses_too_large_a_file(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * (MAX_ATTACHMENT_BYTES + 1))
    with pytest.raises(AttachmentError, match=r"big.txt is too large to attach \(1.0 MB"):
        read_attachment("big.txt", tmp_path)


def test_refuses_missing_folder_and_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AttachmentError, match=r"gone\.txt does not exist"):
        read_attachment("gone.txt", tmp_path)
    (tmp_path / "docs").mkdir()
    with pytest.raises(AttachmentError, match="docs is a folder"):
        read_attachment("docs", tmp_path)
    (tmp_path / "secret.txt").write_text("hidden")

    def denied(path: Path, limit: int, what: str) -> None:
        # chmod 0 is no obstacle to root, which the tests may run as.
        try:
            raise PermissionError(13, "Permission denied")
        except PermissionError as error:
            message = f"The {what} {path} cannot be opened: permission denied."
            raise UnsafeFileError(message) from error

    monkeypatch.setattr(attachments, "read_bytes", denied)
    with pytest.raises(AttachmentError, match=r"secret\.txt cannot be read: permission denied"):
        read_attachment("secret.txt", tmp_path)


def test_a_name_with_escape_sequences_is_made_safe(tmp_path: Path) -> None:
    name = "evil\x1b]0;owned\x07\x1b[2J.txt"
    (tmp_path / name).write_text("hi")
    attachment = read_attachment(name, tmp_path)
    assert attachment.name == "evil.txt"
    with pytest.raises(AttachmentError) as refused:
        read_attachment("gone\x1b[31m.txt", tmp_path)
    assert "\x1b" not in str(refused.value)


# --- what the model is sent ---------------------------------------------------------


def test_prompt_text_appends_each_file_in_a_fenced_block() -> None:
    notes = Attachment("notes.txt", "milk\neggs")
    readme = Attachment("README.md", "Run:\n```sh\nmake\n```\n")
    assert prompt_text("summarise @notes.txt", [notes]) == (
        "summarise @notes.txt\n\nFile: notes.txt\n```\nmilk\neggs\n```"
    )
    # A file's own fences stay inside its block: the fence is longer.
    assert attachment_block(readme) == "File: README.md\n````\nRun:\n```sh\nmake\n```\n````"
    assert prompt_text("", [notes]).startswith("File: notes.txt")
    assert prompt_text("no files", []) == "no files"
    message = Message("user", "summarise @notes.txt", attachments=(notes,))
    assert message.as_chat_dict()["content"] == prompt_text(message.content, [notes])


# --- @path in the draft --------------------------------------------------------------


def test_mentions_are_at_signs_after_white_space() -> None:
    text = 'mail me@example.com about @notes.txt and @"my file.txt", @'
    assert [m.path for m in find_mentions(text)] == ["notes.txt", "my file.txt"]
    assert mention_before("see @do", 7) is not None
    assert mention_before("see @do", 7).path == "do"  # type: ignore[union-attr]
    assert mention_before("see @", 5).path == ""  # type: ignore[union-attr]
    assert mention_before("a@b", 3) is None


def test_only_readable_files_attach_and_problems_are_reported(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("milk")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\x00\x00")
    (tmp_path / "src").mkdir()
    draft = DraftAttachments(tmp_path)
    attached = draft.resolve("@notes.txt, @alice @src and @photo.png and @notes.txt again")
    assert attached.attachments == [Attachment("notes.txt", "milk")]
    assert attached.mentioned == {"notes.txt"}
    assert attached.problems == ["photo.png is not a text file (it holds binary data)."]
    # A picked file comes after the named ones, once.
    draft.pick(str(tmp_path / "notes.txt"))
    (tmp_path / "todo.txt").write_text("call")
    draft.pick("todo.txt")
    assert [a.name for a in draft.resolve("@notes.txt").attachments] == [
        "notes.txt",
        str(tmp_path / "notes.txt"),
        "todo.txt",
    ]
    # Read again when the file changes.
    (tmp_path / "notes.txt").write_text("milk and bread")
    assert draft.resolve("@notes.txt").attachments[0].text == "milk and bread"


def test_without_mention_takes_the_at_sign_off() -> None:
    text = 'read @notes.txt. and @"my file.txt" but not @other'
    assert without_mention(text, "notes.txt") == 'read notes.txt. and @"my file.txt" but not @other'
    assert without_mention(text, "my file.txt") == "read @notes.txt. and my file.txt but not @other"


def test_complete_path_lists_matching_entries(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "notebook.md").write_text("")
    (tmp_path / ".hidden").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "plan.md").write_text("")
    assert complete_path("no", tmp_path) == ["notebook.md", "notes.txt"]
    assert complete_path("", tmp_path) == ["docs/", "notebook.md", "notes.txt"]
    assert complete_path(".", tmp_path) == [".hidden"]
    assert complete_path("docs/p", tmp_path) == ["docs/plan.md"]
    assert complete_path(str(tmp_path / "docs") + "/", tmp_path) == [
        str(tmp_path / "docs" / "plan.md")
    ]
    assert complete_path("missing/x", tmp_path) == []


# --- saved with the message, exported -----------------------------------------------


def _conversation() -> Conversation:
    notes = Attachment("notes.txt", "milk\neggs\n")
    plan = Attachment("docs/plan.md", "# Plan\n```py\nx = 1\n```\n")
    return Conversation(
        messages=[
            Message("user", "summarise @notes.txt", attachments=(notes, plan)),
            Message("assistant", "Milk and eggs."),
        ]
    )


def test_store_round_trip_keeps_the_prompt_byte_identical(tmp_path: Path) -> None:
    conv = _conversation()
    sent = [m.as_chat_dict() for m in conv.messages]
    with Store(tmp_path / "chat.db") as store:
        conv_id = store.create_conversation(conv)
        store.add_message(
            conv_id,
            Message(
                "user",
                "and this?",
                parent=conv.messages[-1],
                attachments=(Attachment("b.txt", "b"),),
            ),
        )
        loaded = store.get_conversation(conv_id)
    assert loaded.messages[0].attachments == conv.messages[0].attachments
    assert [m.as_chat_dict() for m in loaded.messages[:2]] == sent
    assert loaded.messages[2].attachments == (Attachment("b.txt", "b"),)
    assert loaded.messages[0].content == "summarise @notes.txt"  # shown as typed


def test_attachments_are_deleted_with_their_conversation(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    with Store(path) as store:
        conv_id = store.create_conversation(_conversation())
        store.delete_conversation(conv_id)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM attachments").fetchone()[0] == 0


def test_migration_adds_the_attachments_table(tmp_path: Path) -> None:
    """A database from before attachments opens, and its messages have none."""
    path = tmp_path / "data" / "chat.db"
    # Made by the kvchat before migration 7 (attachments).
    conn = old_database(path, 6)
    conn.execute(
        "INSERT INTO conversations (id, title, created, updated) VALUES (1, 'hi', 1.0, 1.0)"
    )
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created) "
        "VALUES (1, 0, 'user', 'hi', 1.0)"
    )
    conn.close()
    conv_id = 1
    with Store(path) as store:
        assert store.get_conversation(conv_id).messages[0].attachments == ()
        conv = _conversation()
        new_id = store.create_conversation(conv)
        assert store.get_conversation(new_id).messages[0].attachments == (
            conv.messages[0].attachments
        )
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_exports_carry_the_attachments() -> None:
    conv = _conversation()
    markdown = to_markdown(conv)
    assert "summarise @notes.txt\n\nFile: notes.txt\n```\nmilk\neggs\n```" in markdown
    assert "File: docs/plan.md\n````\n# Plan\n```py" in markdown
    data = json.loads(to_json(conv, {}))
    # The OpenAI-style messages are what the model was sent.
    assert data["messages"][0]["content"] == conv.messages[0].prompt_content
    assert data["kvchat"]["tree"][0]["attachments"] == [
        {"name": "notes.txt", "text": "milk\neggs\n"},
        {"name": "docs/plan.md", "text": "# Plan\n```py\nx = 1\n```\n"},
    ]
    imported, _ = parse_import(to_json(conv, {}))
    assert imported.messages[0].attachments == conv.messages[0].attachments
    assert imported.messages[0].content == "summarise @notes.txt"


def test_import_refuses_malformed_attachments() -> None:
    data = json.loads(to_json(_conversation(), {}))
    data["kvchat"]["tree"][0]["attachments"] = [{"name": "x"}]
    with pytest.raises(Exception, match="attachments"):
        parse_import(json.dumps(data))
