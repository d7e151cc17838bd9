"""A reply cut off when kvchat died: its row says it is still being written until
its final write; read back once its writer has exited, it is interrupted. A
reply another live window is writing is not. (The kill -9 of the real app and
the reopened screen: tests/ui/app/test_interrupted_reply.py.)"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.conversations.transcript import parse_import, to_json, to_markdown
from chat.engine.protocol import Engine, Finished, TokenEvent
from chat.settings.schema import SamplingSettings
from tests.conversations.test_store import VERSION_1_SCHEMA

REPO_ROOT = Path(__file__).resolve().parents[2]
STATS = ReplyStats(30, 30, 3, 0.1, 40.0, "done", seed=1, total_s=0.2)
NOTE = "cut short: kvchat ended before this reply was saved whole"
SETTINGS = ConversationSettings("", {}, "/models/demo.gguf", "demo")


def question(store: Store) -> int:
    """A saved conversation holding one question; its id."""
    return store.create_conversation(Conversation(messages=[Message("user", "Count to ten")]))


def write_in_another_process(db_path: Path, conv_id: int, text: str) -> None:
    """Another kvchat process starts a reply, writes `text` of it, and exits
    without its final write, as a killed one would."""
    code = (
        "import sys\n"
        "from chat.conversations.conversation import Message\n"
        "from chat.conversations.store import Store\n"
        "with Store(sys.argv[1]) as store:\n"
        "    question = store.get_conversation(int(sys.argv[2])).messages[-1]\n"
        "    reply = Message('assistant', '', state='writing', parent=question)\n"
        "    store.add_message(int(sys.argv[2]), reply)\n"
        "    store.update_message_content(reply.id, sys.argv[3])\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(db_path), str(conv_id), text], cwd=REPO_ROOT, check=True
    )


def test_a_reply_whose_writer_exited_mid_reply_reads_as_interrupted(db_path: Path) -> None:
    with Store(db_path) as store:
        conv_id = question(store)
    write_in_another_process(db_path, conv_id, "1, 2, 3,")
    with Store(db_path) as store:
        user, reply = store.get_conversation(conv_id).messages
    assert (user.state, reply.state) == ("complete", "interrupted")
    assert reply.content == "1, 2, 3," and reply.stats is None


def test_a_reply_a_live_window_is_writing_is_not_interrupted(db_path: Path) -> None:
    """This process is the live writer here: to a second connection (another
    window), its reply is being written, and complete after the final write."""
    with Store(db_path) as writer, Store(db_path) as reader:
        conv_id = question(writer)
        asked = writer.get_conversation(conv_id).messages[-1]
        reply = Message("assistant", "", state="writing", parent=asked)
        writer.add_message(conv_id, reply)
        assert reply.id is not None
        writer.update_message_content(reply.id, "1, 2")
        assert reader.get_conversation(conv_id).messages[1].state == "writing"
        writer.update_message_content(reply.id, "1, 2, 3.", stats=STATS, done=True)
        seen = reader.get_conversation(conv_id).messages[1]
    assert (seen.state, seen.content, seen.stats) == ("complete", "1, 2, 3.", STATS)


def saving_a_reply(store: Store, conversation: Conversation) -> tuple[ConversationSaver, int]:
    """A saver that has saved `conversation` and started its reply's row, and
    the conversation's id."""
    saver = ConversationSaver(lambda text: None)
    saver.attach(store)
    assert saver.save_messages(conversation, SETTINGS)
    assert conversation.id is not None
    reply = Message("assistant", "", parent=conversation.messages[-1])
    saver.start_reply(conversation, SETTINGS, reply)
    return saver, conversation.id


def test_the_saver_marks_the_reply_written_until_its_final_write(db_path: Path) -> None:
    conversation = Conversation(messages=[Message("user", "Count to ten")])
    with Store(db_path) as store:
        saver, conv_id = saving_a_reply(store, conversation)
        saver.save_progress("1, 2")
        assert store.get_conversation(conv_id).messages[1].state == "writing"
        saver.finish_reply("1, 2, 3.", STATS)
        saved = store.get_conversation(conv_id).messages[1]
    assert (saved.state, saved.content) == ("complete", "1, 2, 3.")


def test_migration_keeps_every_saved_reply_complete(db_path: Path) -> None:
    db_path.parent.mkdir()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(VERSION_1_SCHEMA)
    with Store(db_path) as store:
        messages = store.get_conversation(7).messages
    assert [(m.role, m.content, m.state) for m in messages] == [
        ("user", "remember the pelican", "complete"),
        ("assistant", "Noted.", "complete"),
    ]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        rows = conn.execute("SELECT writer_pid, interrupted FROM messages").fetchall()
    assert rows == [(None, 0), (None, 0)]


def test_exports_say_a_reply_was_interrupted_and_import_keeps_it(db_path: Path) -> None:
    with Store(db_path) as store:
        conv_id = question(store)
    write_in_another_process(db_path, conv_id, "1, 2, 3,")
    with Store(db_path) as store:
        conv = store.get_conversation(conv_id)
        markdown = to_markdown(conv)
        exported = to_json(conv, {})
        imported, sampling = parse_import(exported)
        copy_id = store.import_conversation(imported, sampling)
        copy = store.get_conversation(copy_id)
    assert f"## Assistant\n\n1, 2, 3,\n\n*{NOTE}*\n" in markdown
    assert [entry["interrupted"] for entry in json.loads(exported)["kvchat"]["tree"]] == [
        False,
        True,
    ]
    # The imported copy is interrupted too, though nobody writes it.
    assert [(m.content, m.state) for m in copy.messages] == [
        ("Count to ten", "complete"),
        ("1, 2, 3,", "interrupted"),
    ]


def test_an_import_with_a_bad_interrupted_value_is_refused() -> None:
    text = json.dumps(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "kvchat": {"messages": [{"interrupted": "yes"}]},
        }
    )
    with pytest.raises(Exception, match='"interrupted" that is not true or false'):
        parse_import(text)


# --- the real model ---------------------------------------------------------------------


@pytest.mark.model
def test_real_model_reply_saved_as_it_streams_then_complete(engine: Engine, db_path: Path) -> None:
    """The demo model writes a reply through the saver: while it streams, the
    row says it is being written and holds the text so far; after the final
    write it is complete, with the engine's text and stats."""
    conversation = Conversation(messages=[Message("user", "Name three colours.")])
    sampling = SamplingSettings(temperature=0, max_tokens=40)
    with Store(db_path) as store, Store(db_path) as other_window:
        saver, conv_id = saving_a_reply(store, conversation)
        text, finished, seen_while_streaming = "", None, []
        for event in engine.stream_reply(
            conversation.chat_messages(), sampling, cancel=threading.Event()
        ):
            if isinstance(event, TokenEvent):
                text += event.text
                saver.save_progress(text)
                seen_while_streaming.append(other_window.get_conversation(conv_id))
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None and finished.text.strip()
        saver.finish_reply(finished.text, finished.stats)
        saved = other_window.get_conversation(conv_id).messages[-1]
    midway = seen_while_streaming[len(seen_while_streaming) // 2].messages[-1]
    assert midway.state == "writing" and finished.text.startswith(midway.content)
    assert (saved.state, saved.content, saved.stats) == ("complete", finished.text, finished.stats)
