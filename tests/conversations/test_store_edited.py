"""A database that another program wrote into: SQLite keeps whatever a column
is given (a text where a time goes, Infinity, bytes where text goes). Such
a conversation still lists, opens, exports and goes on; the values kvchat did
not write read as not there (a time as 1970, a reply's figures as none)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.conversations.transcript import to_json, to_markdown


def saved(path: Path) -> int:
    with Store(path) as store:
        conv = Conversation(title="Edited", model_name="demo")
        conv_id = store.create_conversation(conv)
        question = Message("user", "hi")
        store.add_message(conv_id, question)
        answer = Message("assistant", "hello", stats=ReplyStats(20, 20, 5, 0.1, 50.0, "done"))
        answer.parent = question
        store.add_message(conv_id, answer)
        return conv_id


EDITS = {
    "text-times": (
        "UPDATE conversations SET created = 'abc', updated = 'xyz'",
        "UPDATE messages SET created = 'when'",
    ),
    "infinite-times": (
        "UPDATE conversations SET created = 9e999, updated = -9e999",
        "UPDATE messages SET created = 9e999",
    ),
    "blobs-for-text": (  # a TEXT column turns a number into text, not a blob
        "UPDATE conversations SET title = X'ff00', model_name = X'41', system_prompt = X'42'",
        "UPDATE messages SET content = X'c3', thinking = X'00'",
    ),
    "reply-figures": (
        "UPDATE messages SET ttft_s = 'soon', decode_tps = 9e999, generated_tokens = 'many', "
        "finish_reason = 'bored', writer_pid = 'me', token_probs = 'x', token_ids = 5, "
        "tool_steps = 6, token_count = -3 WHERE role = 'assistant'",
    ),
    "a-role-kvchat-does-not-write": ("UPDATE messages SET role = 'tool' WHERE role = 'user'",),
}


@pytest.mark.parametrize("edits", EDITS.values(), ids=EDITS.keys())
def test_a_conversation_edited_by_another_program_lists_opens_exports_and_goes_on(
    tmp_path: Path, edits: tuple[str, ...]
) -> None:
    path = tmp_path / "c.db"
    conv_id = saved(path)
    with sqlite3.connect(path) as conn:
        for statement in edits:
            conn.execute(statement)
    with Store(path) as store:
        (summary,) = store.list_conversations()
        assert isinstance(summary.title, str) and isinstance(summary.updated, float)
        assert store.titles([conv_id]) == {conv_id: summary.title}
        conv = store.get_conversation(conv_id)
        assert [m.role for m in conv.messages] == ["user", "assistant"]
        assert all(isinstance(m.content, str) for m in conv.messages)
        to_markdown(conv, store.get_sampling(conv_id))  # the export's dates, its figures
        to_json(conv, store.get_sampling(conv_id))
        follow_up = Message("user", "still there?")
        follow_up.parent = conv.messages[-1]
        store.append_turn(conv, follow_up)  # not taken for another window's change
        assert len(store.get_conversation(conv_id).messages) == 3
