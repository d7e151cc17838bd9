"""A reasoning model's reply kept in its two parts (issue 29): the thinking
beside the answer in the database, written as the reply streams, through
branches, regenerate, fork, continue and a reply cut off; the thinking
counts and the first answer token's time with the stats; databases of the
schema before it migrated whole; search over answers only."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

import chat.conversations.database_file as database_file
from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.saver import ConversationSaver, ConversationSettings
from chat.conversations.store import SCHEMA_VERSION, Store
from chat.settings.schema import SamplingSettings
from tests.conversations.conftest import insert_a_question, old_database, question, saver_for

REPO_ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ConversationSettings("", asdict(SamplingSettings()), "/m/qwen3.gguf", "qwen3")
STATS = ReplyStats(40, 40, 30, 0.2, 25.0, "done", seed=3, total_s=1.4)
THOUGHT = "The user asks for a number. Two plus two is four."
THOUGHT_STATS = replace(STATS, thinking_tokens=22, first_answer_s=1.1)


def stream_reply(
    saver: ConversationSaver,
    conv: Conversation,
    steps: list[tuple[str, str]],
    stats: ReplyStats | None = THOUGHT_STATS,
) -> Message:
    """A reply to the last message shown, streamed as (answer, thinking) so far
    at each step and finished with the last, as the session does."""
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    for text, thinking in steps:
        saver.save_progress(text, thinking)
    text, thinking = steps[-1]
    saver.finish_reply(text, stats, [1, 2, 3], thinking=thinking)
    reply.content, reply.thinking, reply.stats = text, thinking, stats
    conv.append(reply)
    return reply


def test_a_reply_is_stored_as_its_thinking_and_its_answer(store: Store) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    stream_reply(
        saver, conv, [("", "The user"), ("", THOUGHT), ("Four", THOUGHT), ("Four.", THOUGHT)]
    )
    assert conv.id is not None
    reply = store.get_conversation(conv.id).messages[-1]
    assert (reply.content, reply.thinking, reply.state) == ("Four.", THOUGHT, "complete")
    assert reply.stats == THOUGHT_STATS
    assert (reply.stats.thinking_tokens, reply.stats.first_answer_s) == (22, 1.1)
    # What the next prompt is made of: the answer, and the thinking apart for
    # the template to keep or drop.
    assert reply.as_chat_dict()["reasoning_content"] == THOUGHT


def test_the_row_holds_the_thinking_while_the_reply_streams(store: Store, db_path: Path) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)

    def row() -> tuple[str, str]:
        with sqlite3.connect(db_path) as conn:
            return conn.execute(
                "SELECT content, thinking FROM messages WHERE id = ?", (reply.id,)
            ).fetchone()

    saver.save_progress("", "Two plus")
    assert row() == ("", "Two plus")
    saver.save_progress("", "Two plus two")
    assert row() == ("", "Two plus two")
    saver.save_progress("Four", "Two plus two")
    assert row() == ("Four", "Two plus two")


def test_progress_is_written_only_when_a_part_changed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    writes: list[tuple[str, str | None]] = []
    update = store.update_message_content

    def recorded(message_id: int, content: str, *args: object, **kwargs: Any) -> None:
        writes.append((content, kwargs.get("thinking")))
        update(message_id, content, *args, **kwargs)

    monkeypatch.setattr(store, "update_message_content", recorded)
    saver.save_progress("", "Two")
    saver.save_progress("", "Two")  # nothing new
    saver.save_progress("", "Two plus")
    saver.save_progress("", "Two plus")
    saver.save_progress("F", "Two plus")
    assert writes == [("", "Two"), ("", "Two plus"), ("F", "Two plus")]


def test_a_reply_without_thinking_is_saved_as_before(store: Store) -> None:
    """The calls the session makes for a model that does not think: no thinking given."""
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress("Fo")
    saver.finish_reply("Four.", STATS, [1])
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.thinking, saved.stats) == ("Four.", "", STATS)
    assert STATS.thinking_tokens == 0 and STATS.first_answer_s is None


def test_a_reply_cut_off_mid_thought_keeps_what_was_thought(db_path: Path) -> None:
    """kvchat killed while the model thinks: the row has the thinking so far,
    no answer, and reads as interrupted (its writer has exited)."""
    with Store(db_path) as store:
        conv_id = store.create_conversation(Conversation(messages=[Message("user", "2+2?")]))
    code = (
        "import sys\n"
        "from chat.conversations.conversation import Conversation, Message\n"
        "from chat.conversations.saver import ConversationSaver, ConversationSettings\n"
        "from chat.conversations.store import Store\n"
        "store = Store(sys.argv[1])\n"
        "conv = store.get_conversation(int(sys.argv[2]))\n"
        "saver = ConversationSaver(print)\n"
        "saver.attach(store)\n"
        "saver.opened(conv, ConversationSettings('', {}, '', ''))\n"
        "reply = Message('assistant', '', parent=conv.messages[-1])\n"
        "saver.start_reply(conv, ConversationSettings('', {}, '', ''), reply)\n"
        "saver.save_progress('', 'Two plus two')\n"
        "import os; os._exit(0)\n"  # no final write, as a killed kvchat
    )
    subprocess.run(
        [sys.executable, "-c", code, str(db_path), str(conv_id)], cwd=REPO_ROOT, check=True
    )
    with Store(db_path) as store:
        reply = store.get_conversation(conv_id).messages[-1]
    assert (reply.content, reply.thinking, reply.state) == ("", "Two plus two", "interrupted")
    assert reply.stats is None


def test_continuing_a_reply_keeps_its_thinking_and_may_add_to_it(store: Store) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    # Cut off by max tokens mid-thought, then continued inside the thought.
    cut = replace(THOUGHT_STATS, finish_reason="max_tokens", thinking_tokens=4, first_answer_s=None)
    reply = stream_reply(saver, conv, [("", "Two plus")], stats=cut)
    saver.start_reply(conv, SETTINGS, reply)  # as ChatSession.begin_continue does
    saver.save_progress("", "Two plus two is four.")
    saver.save_progress("Four.", "Two plus two is four.")
    saver.finish_reply("Four.", THOUGHT_STATS, [1, 2, 3, 4], thinking="Two plus two is four.")
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.id, saved.content, saved.thinking) == (reply.id, "Four.", "Two plus two is four.")
    assert saved.stats == THOUGHT_STATS

    # Continued in its answer, by a caller that passes no thinking: the
    # thinking stays as it was (the reply's own).
    reply.content, reply.thinking = "Four", "Two plus two is four."
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress("Four, of")
    saver.finish_reply("Four, of course.", THOUGHT_STATS, None)
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.thinking) == ("Four, of course.", "Two plus two is four.")


def test_whether_a_reply_ended_inside_its_thinking_is_kept(store: Store, db_path: Path) -> None:
    """Not the same as an empty answer: a thought that closed on the reply's
    last tokens leaves one too, and going on from it starts the answer. The
    row says so while the reply streams (a reply cut off then is continued
    from it) and at its end."""
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    cut = replace(THOUGHT_STATS, finish_reason="max_tokens", first_answer_s=None)
    ended: dict[str, bool] = {}
    for name, open_at_end in (("closed", False), ("open", True)):
        reply = Message("assistant", "", parent=conv.messages[0])
        saver.start_reply(conv, SETTINGS, reply)
        saver.save_progress("", "Two plus", thought_open=True)
        assert row_thought_open(db_path, reply) == 1
        saver.save_progress("", "Two plus two", thought_open=open_at_end)
        assert row_thought_open(db_path, reply) == int(open_at_end)
        saver.finish_reply("", cut, [1, 2], thinking="Two plus two", thought_open=open_at_end)
        reply.thinking, reply.stats, reply.thought_open = "Two plus two", cut, open_at_end
        if conv.messages[-1].role == "user":
            conv.append(reply)
        else:
            conv.add_sibling(conv.messages[-1], reply)
        ended[name] = open_at_end
    assert conv.id is not None
    saved = store.get_conversation(conv.id)
    replies = saved.tree.siblings(saved.messages[-1])
    assert sorted(r.thought_open for r in replies) == [False, True]
    assert all((r.content, r.thinking) == ("", "Two plus two") for r in replies)
    # A fork copies it.
    fork_id = store.create_conversation(saved.fork_at(saved.messages[-1]))
    assert store.get_conversation(fork_id).messages[-1].thought_open == (
        saved.messages[-1].thought_open
    )


def row_thought_open(db_path: Path, reply: Message) -> int:
    with sqlite3.connect(db_path) as conn:
        return conn.execute(
            "SELECT thought_open FROM messages WHERE id = ?", (reply.id,)
        ).fetchone()[0]


def test_replies_saved_before_the_thought_was_recorded_read_as_kvchat_read_them(
    db_path: Path,
) -> None:
    """Schema 10 did not record it: a reply with thinking and no answer was
    continued inside its thought, and still is; one with an answer was not."""
    conn = old_database(db_path, 10)
    insert_a_question(conn)
    for id_, content in ((2, ""), (3, "Four.")):
        conn.execute(
            "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, "
            "content, created, thinking, finish_reason) VALUES "
            f"({id_}, 1, {id_ - 1}, 1, 1, 'assistant', ?, 3.0, 'Two plus', 'max_tokens')",
            (content,),
        )
    conn.close()
    with Store(db_path) as store:
        conv = store.get_conversation(1)
        replies = {r.content: r.thought_open for r in conv.tree.siblings(conv.messages[-1])}
    assert replies == {"": True, "Four.": False}


def test_a_continuation_that_fails_leaves_the_reply_as_it_was(store: Store) -> None:
    """ChatSession.end_continue_failed writes the reply again as it was."""
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    cut = replace(THOUGHT_STATS, finish_reason="max_tokens")
    reply = stream_reply(saver, conv, [("", "Two plus")], stats=cut)
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress("", "Two plus two and then")
    saver.finish_reply(reply.content, reply.stats, reply.token_ids)
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.thinking) == ("", "Two plus")


def test_regenerated_and_forked_replies_keep_their_own_thinking(store: Store) -> None:
    saver = saver_for(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    first = stream_reply(saver, conv, [("Four.", THOUGHT)])
    # Regenerate: a sibling with its own thinking; the first keeps its own.
    second = Message("assistant", "", parent=conv.messages[-2])
    saver.start_reply(conv, SETTINGS, second)
    saver.finish_reply("4", THOUGHT_STATS, None, thinking="Count on fingers.")
    second.content, second.thinking = "4", "Count on fingers."
    conv.add_sibling(first, second)
    assert conv.id is not None
    saved = store.get_conversation(conv.id)
    by_answer = {m.content: m.thinking for m in saved.tree.siblings(saved.messages[-1])}
    assert by_answer == {"Four.": THOUGHT, "4": "Count on fingers."}

    # Switching branches shows each with its thinking.
    saved.show(next(m for m in saved.tree if m.content == "Four."))
    assert saved.messages[-1].thinking == THOUGHT

    # A fork copies the thinking, and saves it in the new conversation.
    fork = saved.fork_at(saved.messages[-1])
    assert fork.messages[-1].thinking == THOUGHT
    fork_id = store.create_conversation(fork)
    copied = store.get_conversation(fork_id).messages[-1]
    assert (copied.content, copied.thinking, copied.stats) == ("Four.", THOUGHT, THOUGHT_STATS)


def test_a_final_write_that_failed_is_written_later_with_its_thinking(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: list[str] = []
    saver = ConversationSaver(reports.append)
    saver.attach(store)
    conv = Conversation()
    question(saver, conv, SETTINGS)
    reply = Message("assistant", "", parent=conv.messages[-1])
    saver.start_reply(conv, SETTINGS, reply)
    saver.save_progress("", "Two")
    # Another program holds the write lock for longer than the busy timeout.
    monkeypatch.setattr(database_file, "BUSY_TIMEOUT_S", 0.1)
    store.wait_when_locked(0.1)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    saver.finish_reply("Four.", THOUGHT_STATS, None, thinking=THOUGHT)
    reply.content, reply.thinking, reply.stats = "Four.", THOUGHT, THOUGHT_STATS
    conv.append(reply)
    assert saver.failing and len(reports) == 1
    blocker.execute("COMMIT")
    blocker.close()
    saver.retry(conv, SETTINGS)
    assert not saver.failing
    assert conv.id is not None
    saved = store.get_conversation(conv.id).messages[-1]
    assert (saved.content, saved.thinking, saved.stats) == ("Four.", THOUGHT, THOUGHT_STATS)


def test_search_looks_at_answers_not_at_thinking(store: Store) -> None:
    conv = Conversation(
        messages=[
            Message("user", "Name a bird"),
            Message("assistant", "A heron.", thinking="Not a pelican, too obvious."),
        ]
    )
    conv_id = store.create_conversation(conv)
    assert [s.id for s in store.list_conversations("heron")] == [conv_id]
    assert store.list_conversations("pelican") == []


def test_search_without_fts_looks_at_answers_only(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chat.conversations.search as search_module

    monkeypatch.setattr(search_module, "fts5_available", lambda conn: False)
    with Store(db_path) as store:
        assert not store.has_fts
        conv = Conversation(
            messages=[
                Message("user", "Bird?"),
                Message("assistant", "A heron.", thinking="pelican"),
            ]
        )
        store.create_conversation(conv)
        assert store.list_conversations("pelican") == []
        assert len(store.list_conversations("heron")) == 1


def test_migrating_a_schema_7_database_keeps_every_row(db_path: Path) -> None:
    """A database as the kvchat before thinking made it: every message comes
    back as it was, without thinking, its stats with no thinking tokens and
    no answer time; new replies then keep theirs."""
    conn = old_database(db_path, 7)
    insert_a_question(conn)
    conn.execute(
        "INSERT INTO messages (id, conversation_id, position, parent_id, depth, role, content, "
        "created, token_count, prompt_tokens, prompt_evaluated, generated_tokens, ttft_s, "
        "decode_tps, finish_reason, seed, total_s, token_ids) VALUES "
        "(2, 1, 1, 1, 1, 'assistant', '<think>\nsum\n</think>\n\nFour.', 3.0, 9, 20, 20, 9, "
        "0.1, 30.0, 'done', 4, 0.4, X'0100000002000000')"
    )
    conn.execute(
        "INSERT INTO attachments (message_id, position, name, text) VALUES (1, 0, 'a.txt', 'x')"
    )
    conn.close()
    with Store(db_path) as store:
        conv = store.get_conversation(1)
        user, reply = conv.messages
        assert (user.content, user.thinking, user.attachments[0].name) == (
            "What is 2+2?",
            "",
            "a.txt",
        )
        # Replies from before were not split: their text stays whole, as saved.
        assert (reply.content, reply.thinking) == ("<think>\nsum\n</think>\n\nFour.", "")
        assert reply.stats == ReplyStats(20, 20, 9, 0.1, 30.0, "done", 4, 0.4)
        assert reply.token_ids == [1, 2]
        assert [s.id for s in store.list_conversations("Four")] == [1]
        new = Message("assistant", "4", parent=user, thinking="again", stats=THOUGHT_STATS)
        store.add_message(1, new)
        again = store.get_conversation(1).messages[-1]
        assert (again.thinking, again.stats) == ("again", THOUGHT_STATS)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 3
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
