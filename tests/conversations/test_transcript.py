"""Export to Markdown and JSON, import from JSON, and the errors a bad file gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.conversations.transcript import (
    FORMAT_VERSION,
    MAX_IMPORT_BYTES,
    ImportFormatError,
    parse_import,
    read_import_file,
    to_json,
    to_markdown,
)

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "seed": None, "stop": ["</s>"]}


def conversation() -> Conversation:
    return Conversation(
        system_prompt="You are a pirate.",
        title="Treasure talk",
        created=1_700_000_000.25,
        updated=1_700_000_123.5,
        model_path="/models/demo.gguf",
        model_name="demo",
        messages=[
            Message("user", "Where is the gold?", created=1_700_000_001.0, token_count=7),
            Message(
                "assistant",
                "Arr, *under* the palm tree.\n\n```\nx = 1\n```",
                created=1_700_000_002.123456789,
                token_count=15,
                stats=ReplyStats(140, 12, 15, 0.31, 41.25, "done", seed=99, total_s=0.7),
            ),
            Message("user", 'Ünïcödé and "quotes" 🦜', created=1_700_000_010.0),
            Message(
                "assistant",
                "Cut short",
                created=1_700_000_011.0,
                stats=ReplyStats(160, 20, 3, 0.2, 30.0, "stopped"),
            ),
        ],
    )


def test_markdown_has_a_header_and_every_message() -> None:
    text = to_markdown(conversation(), SAMPLING)
    assert text.startswith("# Treasure talk\n")
    assert "- **Model:** demo (`/models/demo.gguf`)" in text
    assert "- **Created:** 2023-11-1" in text  # the day depends on the local time zone
    assert "temperature = 0.7" in text and "top_p = 0.95" in text
    assert "## System prompt\n\nYou are a pirate.\n" in text
    assert text.count("## User") == 2 and text.count("## Assistant") == 2
    assert "Arr, *under* the palm tree.\n\n```\nx = 1\n```" in text
    assert "15 tokens · 41.2 tokens/s · first token 0.31 s" in text
    assert text.index("Where is the gold?") < text.index("Arr,") < text.index("Cut short")


def test_markdown_of_an_untitled_conversation_uses_the_first_message() -> None:
    text = to_markdown(Conversation(messages=[Message("user", "What is 2+2?")]))
    assert text.startswith("# What is 2+2?\n")
    assert "System prompt" not in text and "Sampling" not in text


def test_json_is_openai_style_with_kvchat_metadata() -> None:
    data = json.loads(to_json(conversation(), SAMPLING))
    assert data["messages"][0] == {"role": "system", "content": "You are a pirate."}
    assert [m["role"] for m in data["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    meta = data["kvchat"]
    assert meta["format"] == FORMAT_VERSION
    assert (meta["title"], meta["model"], meta["sampling"]) == ("Treasure talk", "demo", SAMPLING)
    assert meta["created"] == 1_700_000_000.25
    assert len(meta["messages"]) == 4
    assert meta["messages"][1]["stats"]["decode_tps"] == 41.25
    assert meta["messages"][0]["stats"] is None


def test_round_trip_is_exact() -> None:
    conv = conversation()
    parsed, sampling = parse_import(to_json(conv, SAMPLING))
    assert parsed == conv
    assert sampling == SAMPLING


def test_round_trip_without_system_prompt_keeps_a_leading_system_message() -> None:
    conv = Conversation(
        title="t",
        messages=[Message("system", "mid-chat instruction"), Message("user", "hi")],
    )
    parsed, _ = parse_import(to_json(conv, {}))
    assert parsed == conv


def test_round_trip_through_the_store(tmp_path: Path) -> None:
    exported = to_json(conversation(), SAMPLING)
    with Store(tmp_path / "c.db") as store:
        conv, sampling = parse_import(exported)
        conv_id = store.import_conversation(conv, sampling)
        assert to_json(store.get_conversation(conv_id), store.get_sampling(conv_id)) == exported


def test_plain_openai_file() -> None:
    text = json.dumps(
        {
            "model": "gpt-x",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "First question\nwith two lines"},
                {"role": "assistant", "content": "Answer", "name": "bot"},
            ],
        }
    )
    conv, sampling = parse_import(text)
    assert conv.system_prompt == "Be brief."
    assert [(m.role, m.content) for m in conv.messages] == [
        ("user", "First question\nwith two lines"),
        ("assistant", "Answer"),
    ]
    assert conv.title == "First question"
    assert sampling == {}
    assert conv.id is None and all(m.id is None and m.stats is None for m in conv.messages)


def test_bare_list_of_messages() -> None:
    conv, sampling = parse_import('[{"role": "user", "content": "hi"}]')
    assert conv.system_prompt == "" and conv.messages[0].content == "hi"
    assert sampling == {}


def kvchat_file(**meta_changes: object) -> str:
    data = json.loads(to_json(conversation(), SAMPLING))
    data["kvchat"].update(meta_changes)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"messages": [', "not valid JSON (Expecting value at line 1, column 15)"),
        ("{\n  'messages': []\n}", "at line 2, column 3"),
        ("[" * 100_000, "not valid JSON"),
        ("42", 'expected an object with a "messages" list, or a list of messages'),
        ('{"chat": []}', 'expected an object with a "messages" list'),
        ('{"messages": {"role": "user"}}', '"messages" is not a list'),
        ("[]", "it has no messages"),
        ('{"messages": []}', "it has no messages"),
        ('["hello"]', "message 1 is not an object"),
        ('[{"content": "x"}]', 'message 1 has no "role"'),
        (
            '[{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}]',
            'message 2 has unknown role "tool" (known: system, user, assistant)',
        ),
        ('[{"role": "user", "content": "a"}, {"role": "assistant"}]', 'message 2 has no "content"'),
        ('[{"role": "user", "content": null}]', "message 1's content is not a string"),
        (
            '[{"role": "user", "content": [{"type": "text", "text": "x"}]}]',
            "message 1's content is not a string",
        ),
        (
            '{"messages": [{"role": "user", "content": "x"}], "kvchat": 3}',
            '"kvchat" is not an object',
        ),
        (kvchat_file(format=FORMAT_VERSION + 1), "written by a newer kvchat"),
        (kvchat_file(messages=[]), '"kvchat.messages" has 0 entries for 4 messages'),
        (kvchat_file(sampling=[1]), '"kvchat.sampling" is not an object'),
        (kvchat_file(title=5), '"kvchat.title" is not a string'),
        (kvchat_file(created="yesterday"), '"kvchat.created" is not a number'),
    ],
)
def test_bad_imports_say_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(ImportFormatError) as error:
        parse_import(text)
    message = str(error.value)
    assert expected in message
    assert message.startswith("Cannot import this conversation: ") and message.endswith(".")


def test_bad_stats_are_reported_with_the_message_number() -> None:
    data = json.loads(to_json(conversation(), SAMPLING))
    data["kvchat"]["messages"][1]["stats"]["finish_reason"] = "bored"
    with pytest.raises(ImportFormatError, match="stats of message 3 have an unknown finish"):
        parse_import(json.dumps(data))
    data["kvchat"]["messages"][1]["stats"] = {"prompt_tokens": 1}
    with pytest.raises(ImportFormatError, match='no whole number "prompt_evaluated"'):
        parse_import(json.dumps(data))


def test_read_import_file(tmp_path: Path) -> None:
    good = tmp_path / "chat.json"
    good.write_bytes(b"\xef\xbb\xbf" + to_json(conversation(), SAMPLING).encode())  # with BOM
    conv, sampling = read_import_file(good)
    assert conv == conversation() and sampling == SAMPLING


def test_read_import_file_refuses_a_huge_file_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as file:
        file.truncate(MAX_IMPORT_BYTES + 1)  # sparse: no 20 MB written
    with pytest.raises(
        ImportFormatError, match=r"is 20\.0 MB and kvchat imports files up to 20 MB"
    ):
        read_import_file(huge)


def test_read_import_file_errors_name_the_file(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('[{"role": "user", "content": "caf\xe9"}]'.encode("latin-1"))
    with pytest.raises(ImportFormatError) as error:
        read_import_file(latin1)
    assert str(error.value) == (
        f"Cannot import {latin1}: it is not UTF-8 text (byte 0xe9 at offset 33)."
    )

    with pytest.raises(ImportFormatError, match="cannot read it"):
        read_import_file(tmp_path / "missing.json")

    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"messages": "nope"}')
    with pytest.raises(
        ImportFormatError, match=re.escape(f'Cannot import {wrong}: "messages" is not a list')
    ):
        read_import_file(wrong)
