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
    # How each reply ended, in the app's words (the export said "error" for "cut off").
    assert "(128 reused) · done*" in text and "(140 reused) · stopped*" in text
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
    assert [(m["id"], m["parent"]) for m in meta["tree"]] == [(1, None), (2, 1), (3, 2), (4, 3)]
    assert meta["shown"] == 4
    assert meta["tree"][1]["stats"]["decode_tps"] == 41.25
    assert meta["tree"][0]["stats"] is None


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


def format_1_file(**meta_changes: object) -> str:
    """`conversation()` as kvchat wrote it before conversations were trees:
    one branch, with one metadata entry per message."""
    data = json.loads(to_json(conversation(), SAMPLING))
    meta = data["kvchat"]
    meta["format"] = 1
    meta["messages"] = [
        {key: entry[key] for key in ("created", "token_count", "stats", "interrupted")}
        for entry in meta.pop("tree")
    ]
    del meta["shown"]
    meta.update(meta_changes)
    return json.dumps(data)


def test_a_file_in_the_earlier_format_still_imports() -> None:
    conv, sampling = parse_import(format_1_file())
    assert conv == conversation() and sampling == SAMPLING
    assert [m.parent for m in conv.messages[1:]] == conv.messages[:-1]
    assert len(conv.tree) == 4


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
            '[{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}]',
            'message 2 has unknown role "robot" (known: system, user, assistant)',
        ),
        (
            # A tool's result is read as part of the reply that called it.
            '[{"role": "user", "content": "a"}, {"role": "tool", "content": "x"}]',
            "message 2 is a tool result that follows no call",
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
        (kvchat_file(tree=[]), "it has no messages"),
        (kvchat_file(tree={}), '"kvchat.tree" is not a list'),
        (kvchat_file(shown=99), '"kvchat.shown" is not the id of a message in "kvchat.tree"'),
        (kvchat_file(tree=[{"role": "user", "content": "x"}]), 'message 1 has no "id"'),
        (
            kvchat_file(tree=[{"id": 1, "role": "user", "content": "x", "parent": 2}]),
            'the "parent" of message 1 (2) is not a message before it',
        ),
        (
            kvchat_file(
                tree=[
                    {"id": "a", "role": "user", "content": "x"},
                    {"id": "a", "role": "user", "content": "y"},
                ]
            ),
            'message 2 has the "id" of an earlier one (a)',
        ),
        (
            kvchat_file(tree=[{"id": 1, "role": "user", "content": "x", "token_ids": [1.5]}]),
            'message 1 has "token_ids" that are not a list of token ids',
        ),
        (format_1_file(messages=[]), '"kvchat.messages" has 0 entries for 4 messages'),
        (kvchat_file(sampling=[1]), '"kvchat.sampling" is not an object'),
        (kvchat_file(title=5), '"kvchat.title" is not a string'),
        (kvchat_file(created="yesterday"), '"kvchat.created" is not a time'),
    ],
)
def test_bad_imports_say_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(ImportFormatError) as error:
        parse_import(text)
    message = str(error.value)
    assert expected in message
    assert message.startswith("Cannot import this conversation: ") and message.endswith(".")


def test_bad_stats_are_reported_with_the_message_number() -> None:
    data = json.loads(format_1_file())
    data["kvchat"]["messages"][1]["stats"]["finish_reason"] = "bored"
    with pytest.raises(ImportFormatError, match="stats of message 3 have an unknown finish"):
        parse_import(json.dumps(data))
    data["kvchat"]["messages"][1]["stats"] = {"prompt_tokens": 1}
    with pytest.raises(ImportFormatError, match='no whole number "prompt_evaluated"'):
        parse_import(json.dumps(data))
    # In the tree, a message's number is its place in "kvchat.tree".
    data = json.loads(to_json(conversation(), SAMPLING))
    data["kvchat"]["tree"][1]["stats"]["finish_reason"] = "bored"
    with pytest.raises(ImportFormatError, match="stats of message 2 have an unknown finish"):
        parse_import(json.dumps(data))


# --- trees ------------------------------------------------------------------------------


def branched() -> Conversation:
    """Q with two replies (A1, then A2 regenerated), a follow-up under A1, and an
    edited first question with its own reply; the branch shown ends at A2."""
    conv = Conversation(title="Branches", created=1.0, updated=2.0)
    question = Message("user", "Q", created=10.0)
    conv.append(question)
    first = Message("assistant", "A1", created=11.0, token_ids=[1, 2, 3])
    conv.append(first)
    conv.append(Message("user", "follow-up", created=12.0))
    conv.append(Message("assistant", "A1 again", created=13.0))
    conv.add_sibling(question, Message("user", "Q edited", created=14.0))
    conv.append(Message("assistant", "B", created=15.0))
    conv.add_sibling(first, Message("assistant", "A2", created=16.0, token_ids=[4, 5]))
    return conv


def test_json_round_trip_of_a_tree_is_exact(tmp_path: Path) -> None:
    conv = branched()
    exported = to_json(conv, {})
    data = json.loads(exported)
    # Other tools see the branch shown.
    assert [m["content"] for m in data["messages"]] == ["Q", "A2"]
    assert len(data["kvchat"]["tree"]) == 7
    parsed, _ = parse_import(exported)
    assert [m.content for m in parsed.messages] == ["Q", "A2"]
    assert [m.content for m in parsed.tree] == [m.content for m in conv.tree]
    assert [m.token_ids for m in parsed.tree] == [m.token_ids for m in conv.tree]
    assert [[m.content for m in parsed.tree.path_to(leaf)] for leaf in parsed.tree.leaves()] == [
        ["Q", "A1", "follow-up", "A1 again"],
        ["Q edited", "B"],
        ["Q", "A2"],
    ]
    assert to_json(parsed, {}) == exported
    with Store(tmp_path / "c.db") as store:
        conv_id = store.import_conversation(parsed, {})
        assert to_json(store.get_conversation(conv_id), {}) == exported


def test_import_of_a_tree_shows_the_newest_branch_under_the_message_shown() -> None:
    data = json.loads(to_json(branched(), {}))
    data["kvchat"]["shown"] = 1  # Q: the branch below it last written to, A2
    assert [m.content for m in parse_import(json.dumps(data))[0].messages] == ["Q", "A2"]
    del data["kvchat"]["shown"]  # the newest message
    assert [m.content for m in parse_import(json.dumps(data))[0].messages] == ["Q", "A2"]
    data["kvchat"]["shown"] = 4
    assert [m.content for m in parse_import(json.dumps(data))[0].messages] == [
        "Q",
        "A1",
        "follow-up",
        "A1 again",
    ]


def test_markdown_is_the_branch_shown_or_every_branch() -> None:
    conv = branched()
    shown = to_markdown(conv)
    assert "- **Branches:** 3 (the one last shown below)" in shown
    assert "## User\n\nQ\n\n## Assistant\n\nA2\n" in shown
    assert "A1" not in shown and "Q edited" not in shown

    every = to_markdown(conv, all_branches=True)
    assert "- **Branches:** 3 (all below)" in every
    headings = [line for line in every.splitlines() if line.startswith("## ")]
    assert headings == ["## Branch 1 of 3", "## Branch 2 of 3", "## Branch 3 of 3 (shown)"]
    sections = every.split("## Branch ")[1:]
    assert [re.findall(r"^### (\w+)\n\n(.*)$", part, re.M) for part in sections] == [
        [("User", "Q"), ("Assistant", "A1"), ("User", "follow-up"), ("Assistant", "A1 again")],
        [("User", "Q edited"), ("Assistant", "B")],
        [("User", "Q"), ("Assistant", "A2")],
    ]
    # A conversation of one branch says nothing about branches.
    assert "Branches" not in to_markdown(conversation())


def test_markdown_of_every_branch_shows_escape_sequences() -> None:
    conv = branched()
    conv.add_sibling(conv.messages[-1], Message("assistant", "x\x1b]0;pwned\x07y\x9b2J"))
    text = to_markdown(conv, all_branches=True)
    assert "x␛]0;pwned␇y<U+009B>2J" in text
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text


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


@pytest.mark.parametrize(
    ("reason", "words"),
    [("max_tokens", "max tokens reached"), ("context_full", "context full"), ("error", "cut off")],
)
def test_markdown_says_how_a_reply_ended_in_words(reason: str, words: str) -> None:
    stats = ReplyStats(10, 0, 5, 0.1, 20.0, reason)  # type: ignore[arg-type]
    text = to_markdown(
        Conversation(messages=[Message("user", "Hi"), Message("assistant", "Hel", stats=stats)])
    )
    assert f"(10 reused) · {words}*" in text


def _set(data: dict[str, object], path: str, value: object) -> None:
    """Set the field at `path` ("kvchat.tree.1.stats.ttft_s") in exported JSON."""
    *parents, last = path.split(".")
    node: object = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]  # type: ignore[index]
    node[last] = value  # type: ignore[index]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        *(
            (field, value)
            for field in ("kvchat.created", "kvchat.tree.0.created")
            for value in (10**400, 10**300, float("nan"), float("inf"))
        ),
        # A reply's figures may be Infinity (test_transcript_tools), not NaN.
        *(("kvchat.tree.1.stats.ttft_s", value) for value in (10**400, float("nan"))),
        *(
            (field, value)
            for field in (
                "kvchat.tree.0.token_count",
                "kvchat.tree.1.stats.prompt_tokens",
                "kvchat.tree.1.stats.seed",
            )
            for value in (10**400, 2**63)
        ),
    ],
    ids=lambda value: {10**400: "400-digits", 10**300: "300-digits"}.get(value, str(value)),
)
def test_a_number_kvchat_cannot_hold_is_refused_and_nothing_is_stored(
    tmp_path: Path, field: str, value: float
) -> None:
    """Python's json reads an integer of any length, NaN and Infinity: a time
    of 400 digits was a traceback (float() overflowed), and a count past 64
    bits reached SQLite, which refused it as "no conversation with that id"."""
    data = json.loads(to_json(conversation(), SAMPLING))
    _set(data, field, value)
    with pytest.raises(ImportFormatError, match=r"(number|time)"):
        parse_import(json.dumps(data))


def test_a_figure_written_as_a_long_integer_is_stored_as_a_number(tmp_path: Path) -> None:
    """10**300 seconds is a figure a float holds, and no SQLite integer: stored
    as a float (a message's time that far is refused: no date shows it)."""
    data = json.loads(to_json(conversation(), SAMPLING))
    _set(data, "kvchat.tree.1.stats.ttft_s", 10**300)
    conv, sampling = parse_import(json.dumps(data))
    with Store(tmp_path / "c.db") as store:
        stored = store.get_conversation(store.import_conversation(conv, sampling))
    stats = stored.messages[1].stats
    assert stats is not None and stats.ttft_s == 1e300
