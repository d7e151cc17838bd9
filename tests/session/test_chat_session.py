"""The chat session without Textual: a conversation's turns, window and saving
(scripted engine for counting, a real database; and the real demo model)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.engine.protocol import Engine, Finished
from chat.errors import KvchatError
from chat.models.files import ModelCandidate
from chat.runtime.model_loader import ModelLoader, ModelReady
from chat.session.chat_session import ChatSession
from chat.settings.schema import ModelSettings, Settings
from tests.fakes import ScriptedEngine

STATS = ReplyStats(10, 10, 2, 0.01, 100.0, "done", seed=99)


def loader_of(engine: Engine) -> ModelLoader:
    """A model loader holding `engine`, as after a load."""
    loader = ModelLoader(lambda outcome: None)
    candidate = ModelCandidate(engine.info.path, 0, "test")
    loader.accept(ModelReady(engine, candidate, ModelSettings()))
    return loader


def session_with(store: Store | None = None, engine: Engine | None = None) -> ChatSession:
    reports: list[str] = []
    session = ChatSession(Settings(), loader_of(engine or ScriptedEngine()), reports.append)
    if store is not None:
        session.saver.attach(store)
    return session


def one_turn(session: ChatSession, text: str, answer: str) -> Message:
    plan = session.plan(text)
    assert plan is not None and plan.problem is None
    session.add_user_message(text, plan)
    reply = session.begin_reply(plan)
    session.end_reply(reply, Finished(answer, STATS))
    return reply


def test_the_question_is_saved_before_the_reply_starts(tmp_path: Path) -> None:
    with Store(tmp_path / "c.db") as store:
        session = session_with(store)
        plan = session.plan("What is a KV cache?")
        assert plan is not None
        session.add_user_message("What is a KV cache?", plan)
        conv_id = session.conversation.id
        assert conv_id is not None
        saved = store.get_conversation(conv_id)
        assert [(m.role, m.content) for m in saved.messages] == [("user", "What is a KV cache?")]
        assert saved.model_name == "scripted"


def test_a_turn_sends_the_system_prompt_and_the_whole_conversation() -> None:
    session = session_with()
    one_turn(session, "Hi", "Hello!")
    plan = session.plan("And again")
    assert plan is not None
    session.add_user_message("And again", plan)
    assert session.reply_prompt(plan) == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "And again"},
    ]


def test_a_pause_prefills_the_message_or_else_the_conversation() -> None:
    session = session_with()
    assert session.prefill_prompt("") is None  # nothing typed, nothing said yet
    one_turn(session, "Hi", "Hello!")
    messages, a_message = session.prefill_prompt("Next") or ([], False)
    assert a_message and messages[-1] == {"role": "user", "content": "Next"}
    history, a_message = session.prefill_prompt("") or ([], True)
    assert not a_message and history[-1] == {"role": "assistant", "content": "Hello!"}


def test_a_message_too_long_for_the_window_is_not_prefilled() -> None:
    session = session_with(engine=ScriptedEngine(n_ctx=64))
    assert session.prefill_prompt("word " * 200) is None


def test_messages_left_out_of_a_small_window_are_marked() -> None:
    settings = Settings()
    settings.sampling.max_tokens = 16
    session = ChatSession(settings, loader_of(ScriptedEngine(n_ctx=120)), lambda text: None)
    for i in range(6):
        one_turn(session, f"question {i} " + "word " * 8, f"answer {i} " + "word " * 8)
    plan = session.plan("last")
    assert plan is not None and plan.left_out
    session.mark_window(plan)
    outside = session.window_states(session.conversation.messages)
    assert outside[0] and not outside[-1]
    assert all(m.token_count for m in session.conversation.messages)


def test_a_reopened_conversation_keeps_its_own_sampling(tmp_path: Path) -> None:
    with Store(tmp_path / "c.db") as store:
        saved = Conversation(system_prompt="Be brief.", title="old")
        saved.messages = [Message("user", "q"), Message("assistant", "a")]
        conv_id = store.import_conversation(saved, {"temperature": 0.1, "nonsense": 3})
        session = session_with(store)
        session.open(*session.load(conv_id))
        assert session.settings.sampling.temperature == 0.1
        assert session.defaults.sampling.temperature == 0.8  # new conversations unchanged
        # What the settings pane changed reaches the reopened conversation too;
        # its own values stay.
        session.defaults.sampling = replace(session.defaults.sampling, top_k=7)
        session.defaults_changed({"top_k": 7})
        assert session.settings.sampling.top_k == 7
        assert session.settings.sampling.temperature == 0.1
        session.new_conversation()
        assert session.settings is session.defaults and not session.conversation.messages


def test_opening_without_a_database_says_so() -> None:
    session = session_with()
    with pytest.raises(KvchatError, match="not being saved"):
        session.load(1)


def test_a_conversation_made_with_another_model_names_it(tmp_path: Path) -> None:
    session = session_with()
    assert session.made_with_another_model() is None  # a new conversation
    other = tmp_path / "other.gguf"
    session.conversation.model_path = str(other)
    assert session.made_with_another_model() == other
    session.conversation.model_path = "/models/scripted.gguf"  # the scripted engine's
    assert session.made_with_another_model() is None


def test_the_last_seed_is_the_newest_replys() -> None:
    session = session_with()
    assert session.last_seed() is None
    one_turn(session, "Hi", "Hello!")
    assert session.last_seed() == 99


@pytest.mark.model
def test_the_real_model_counts_what_the_turn_sends(engine: Engine) -> None:
    session = session_with(engine=engine)
    one_turn(session, "Name a colour.", "Blue.")
    plan = session.plan("Another one?")
    assert plan is not None
    message = session.add_user_message("Another one?", plan)
    sent = engine.tokenize_chat(session.reply_prompt(plan))
    # The meter's parts add up to exactly the tokens the engine is sent.
    assert plan.system + plan.history + plan.new == len(sent)
    assert message.token_count is not None and 0 < message.token_count < plan.new


def test_while_another_model_loads_no_reply_is_sent_but_the_meter_counts() -> None:
    old, new = ScriptedEngine(n_ctx=4096), ScriptedEngine(n_ctx=1024)
    loader = loader_of(old)
    session = ChatSession(Settings(), loader, lambda text: None)
    loader.begin_reload()
    assert session.engine is None and session.model is None  # no replies meanwhile
    plan = session.plan("hi")
    assert plan is not None and plan.n_ctx == 4096  # counted with the old model
    loader.accept(ModelReady(new, ModelCandidate(new.info.path, 0, "test"), ModelSettings()))
    plan = session.plan("hi")
    assert session.engine is new and plan is not None and plan.n_ctx == 1024
