"""Token probabilities saved with their message: encoding, lazy decoding, the store."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats, TokenChoice
from chat.conversations.store import Store
from chat.conversations.token_probs_codec import (
    StoredTokenChoices,
    TokenProbsFormatError,
    decode_token_probs,
    encode_token_probs,
)
from tests.fakes import scripted_choice

CHOICES = [scripted_choice(text, i) for i, text in enumerate(["Hi", " ␣é", "\n", "[b]x[/b]", ""])]


def stats() -> ReplyStats:
    return ReplyStats(10, 4, len(CHOICES), 0.1, 50.0, "done", 7, 0.2)


def test_encoding_round_trips_exactly() -> None:
    exact = TokenChoice(3, "x", 0.1 + 0.2, 1 / 3, [("x", 0.1 + 0.2)], [("x", 1 / 3)], False)
    for choices in (CHOICES, [exact], []):
        data = encode_token_probs(choices)
        assert decode_token_probs(data) == choices


def test_damaged_or_unknown_data_is_an_error_and_reads_as_empty() -> None:
    for data in (b"", b"\x00\xff", zlib.compress(b"[1, 2]"), zlib.compress(b'{"v": 99}')):
        with pytest.raises(TokenProbsFormatError):
            decode_token_probs(data)
        stored = StoredTokenChoices(data)
        assert list(stored) == [] and stored.problem


def test_stored_choices_decode_on_first_read_only() -> None:
    stored = StoredTokenChoices(encode_token_probs(CHOICES))
    assert not stored.decoded and "not decoded" in repr(stored)
    assert len(stored) == len(CHOICES) and stored.decoded
    assert stored[1] == CHOICES[1] and list(stored[1:3]) == CHOICES[1:3]
    assert stored == CHOICES
    assert CHOICES == stored  # noqa: SIM300  (the list on the left: reflected __eq__)
    # saved again as it is: the bytes are reused, not decoded and encoded again
    again = StoredTokenChoices(stored.data)
    assert encode_token_probs(again) is stored.data and not again.decoded


def test_create_and_reload_a_conversation_with_probabilities(tmp_path: Path) -> None:
    reply = Message("assistant", "Hi", stats=stats(), token_probs=CHOICES)
    conv = Conversation(messages=[Message("user", "hello"), reply])
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(conv)
        loaded = store.get_conversation(conv_id)
    user, stored_reply = loaded.messages
    assert user.token_probs is None
    assert isinstance(stored_reply.token_probs, StoredTokenChoices)
    assert list(stored_reply.token_probs) == CHOICES
    assert loaded.messages == conv.messages


def test_add_message_and_update_message_content_save_probabilities(tmp_path: Path) -> None:
    with Store(tmp_path / "c.db") as store:
        conv_id = store.create_conversation(Conversation())
        # saved as it streams: no probabilities yet, then text, then all at the end
        reply = Message("assistant", "")
        reply_id = store.add_message(conv_id, reply)
        store.update_message_content(reply_id, "H")
        assert store.get_conversation(conv_id).messages[0].token_probs is None
        store.update_message_content(reply_id, "Hi", stats=stats(), token_probs=CHOICES)
        loaded = store.get_conversation(conv_id).messages[0]
        assert loaded.content == "Hi" and loaded.token_probs == CHOICES
        # later updates without probabilities leave them as they are
        store.update_message_content(reply_id, "Hi!", token_count=3)
        assert store.get_conversation(conv_id).messages[0].token_probs == CHOICES
        store.update_message_content(reply_id, "Hi!", token_probs=CHOICES[:2])
        assert store.get_conversation(conv_id).messages[0].token_probs == CHOICES[:2]
        # a message added whole keeps its probabilities too
        store.add_message(conv_id, Message("assistant", "x", token_probs=CHOICES[:1]))
        assert store.get_conversation(conv_id).messages[0].token_probs == CHOICES[:1]
        # replies beside a regenerated one keep theirs
        tree = store.get_conversation(conv_id).tree
        assert [list(m.token_probs or []) for m in tree] == [CHOICES[:2], CHOICES[:1]]


def test_the_column_holds_compressed_json(tmp_path: Path) -> None:
    """Readable with nothing but sqlite3 and zlib (see chat/token_probs_codec.py)."""
    with Store(tmp_path / "c.db") as store:
        store.create_conversation(
            Conversation(messages=[Message("assistant", "Hi", token_probs=CHOICES)])
        )
    with sqlite3.connect(tmp_path / "c.db") as conn:
        (blob,) = conn.execute("SELECT token_probs FROM messages").fetchone()
    text = zlib.decompress(blob).decode()
    assert text.startswith('{"v":1,"tokens":[[1000,"Hi",')


async def test_the_app_saves_recorded_probabilities_with_the_reply(tmp_path: Path) -> None:
    """Saving as it happens (the saver) writes the reply's probabilities at the end."""
    from chat.conversations.store import Store
    from chat.models.files import ModelCandidate
    from chat.settings.schema import Settings
    from chat.ui.app import ChatApp, Launch
    from chat.ui.widgets.prompt_box import PromptBox
    from tests.conftest import turn_done, wait_for
    from tests.fakes import ScriptedEngine, scripted_factory

    engine = ScriptedEngine(replies=[["one", " two", " three"]], delay=0.01)
    database = tmp_path / "conversations.db"
    app = ChatApp(
        Launch(Settings(), ModelCandidate(Path("/m/scripted.gguf"), 1, "test"), database=database),
        engine_factory=scripted_factory(engine),
    )
    async with app.run_test() as pilot:
        screen = app.chat_screen
        await wait_for(lambda: screen.engine is not None and app.store is not None, pilot)
        app.query_one(PromptBox).insert("count")
        await pilot.press("enter")
        await turn_done(screen, pilot, 2)
        conv_id = screen.conversation.id
    assert conv_id is not None
    with Store(database) as store:
        reply = store.get_conversation(conv_id).messages[-1]
    assert reply.token_probs is not None
    assert [c.text for c in reply.token_probs] == ["one", " two", " three"]
