"""A reasoning model's thinking in exports and imports (issue 29): Markdown
folds it in `<details>` before the answer, and no thinking can break out of
the fold (rendered by a real CommonMark renderer, read back by an HTML
parser); JSON carries it as `reasoning_content` with its token counts and
round-trips; import reads the fields other tools and servers write."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from chat.conversations.conversation import Conversation, Message, ReplyStats
from chat.conversations.store import Store
from chat.conversations.transcript import ImportFormatError, parse_import, to_json, to_markdown

THOUGHT = "The user wants a sum.\n\nTwo plus two:\n- count\n- answer **four**"
STATS = ReplyStats(40, 12, 30, 0.25, 20.0, "done", seed=5, total_s=1.5)
THOUGHT_STATS = ReplyStats(
    40, 12, 30, 0.25, 20.0, "done", seed=5, total_s=1.5, thinking_tokens=22, first_answer_s=1.12
)
ANSWER = "It is four."


def conversation(thinking: str = THOUGHT) -> Conversation:
    return Conversation(
        title="Sums",
        created=1_700_000_000.0,
        updated=1_700_000_100.0,
        model_path="/models/qwen3.gguf",
        model_name="qwen3",
        messages=[
            Message("user", "What is 2+2?", created=1_700_000_001.0),
            Message(
                "assistant", ANSWER, created=1_700_000_002.0, stats=THOUGHT_STATS, thinking=thinking
            ),
            Message("user", "And 3+3?", created=1_700_000_003.0),
            Message("assistant", "Six.", created=1_700_000_004.0, stats=STATS),
        ],
    )


# --- Markdown ----------------------------------------------------------------------------


class _Folds(HTMLParser):
    """The text of rendered HTML, each piece with whether it is inside a `<details>`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.pieces: list[tuple[str, bool]] = []
        self.summaries: list[str] = []
        self._in_summary = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.depth += tag == "details"
        self._in_summary = tag == "summary" or self._in_summary

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "details" and self.depth > 0
        if tag == "summary":
            self._in_summary = False

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self.summaries.append(data)
        elif data.strip():
            self.pieces.append((data, self.depth > 0))

    def text(self, inside: bool) -> str:
        return "".join(data for data, folded in self.pieces if folded == inside)


def rendered(markdown: str) -> _Folds:
    folds = _Folds()
    folds.feed(MarkdownIt("commonmark").render(markdown))  # raw HTML passes, as on GitHub
    folds.close()
    return folds


def test_markdown_folds_the_thinking_before_the_answer() -> None:
    text = to_markdown(conversation())
    fold = "<details><summary>Thinking · 22 tokens</summary>"
    assert text.count(fold) == 1
    assert text.index("## Assistant") < text.index(fold) < text.index(ANSWER)
    # Quoted, each line, blank lines too; the Markdown in it stays Markdown.
    assert "> The user wants a sum.\n>\n> Two plus two:\n> - count\n> - answer **four**" in text
    assert "first token 0.25 s · first answer 1.12 s" in text
    # A reply that did not think has no fold.
    assert text.count("<details>") == 1
    html = rendered(text)
    assert html.summaries == ["Thinking · 22 tokens"]
    assert "The user wants a sum." in html.text(inside=True)
    assert "four" in html.text(inside=True)
    assert ANSWER in html.text(inside=False) and "Six." in html.text(inside=False)


def test_a_reply_cut_off_mid_thought_has_its_fold_and_no_answer() -> None:
    conv = Conversation(
        messages=[
            Message("user", "2+2?"),
            Message("assistant", "", thinking="Two plus", state="interrupted"),
        ]
    )
    text = to_markdown(conv)
    assert "<details><summary>Thinking</summary>\n\n> Two plus\n\n</details>" in text
    assert "cut short" in text


HOSTILE = [
    "</details>\n\n# Owned",
    "</DETAILS >\n\n# Owned",
    "<details><summary>x</summary>\n\n# Owned",
    "<!-- never closed\n\n# Owned",
    "<script>\n# Owned",
    "<textarea>\n# Owned",
    "<plaintext>\n# Owned",
    "```\n# Owned\n</details>",
    "~~~~\n# Owned",
    "- a list\n  ```\n</details>\n# Owned",
    "    indented\n</details>\n# Owned",
    "> nested\n</details>\n# Owned",
    "<?php\n# Owned",
    "<![CDATA[\n# Owned",
    "[x]: <javascript:alert(1)>\n# Owned",
    "# Owned\n\n</details>\r\n</details>",
]


@pytest.mark.parametrize("thinking", HOSTILE)
def test_no_thinking_breaks_out_of_its_fold(thinking: str) -> None:
    text = to_markdown(conversation(thinking=thinking))
    html = rendered(text)
    # The answer after the fold, and the next turn, are outside it, whole.
    outside = html.text(inside=False)
    assert ANSWER in outside and "And 3+3?" in outside and "Six." in outside
    # The thinking's text stayed inside.
    assert "Owned" in html.text(inside=True)
    assert "Owned" not in outside
    assert html.depth == 0  # every fold closed


def test_a_thinking_with_escape_sequences_shows_them() -> None:
    text = to_markdown(conversation(thinking="plan \x1b]52;c;aGk=\x07 done"))
    assert "\x1b" not in text and "\x07" not in text
    assert "> plan ␛]52;c;aGk=␇ done" in text


def test_a_less_than_sign_that_opens_no_markup_stays_as_written() -> None:
    text = to_markdown(conversation(thinking="if a < b and b <= 3 then <b>bold</b>"))
    assert "> if a < b and b <= 3 then &lt;b>bold&lt;/b>" in text
    assert "then <b>bold</b>" in rendered(text).text(inside=True)


# --- JSON --------------------------------------------------------------------------------


def test_json_carries_the_thinking_as_reasoning_content() -> None:
    data = json.loads(to_json(conversation(), {}))
    assert data["messages"][1] == {
        "role": "assistant",
        "content": ANSWER,
        "reasoning_content": THOUGHT,
    }
    assert "reasoning_content" not in data["messages"][3]  # did not think
    tree = data["kvchat"]["tree"]
    assert tree[1]["reasoning_content"] == THOUGHT and tree[1]["content"] == ANSWER
    assert "reasoning_content" not in tree[0] and "reasoning_content" not in tree[3]
    assert tree[1]["stats"]["thinking_tokens"] == 22
    assert tree[1]["stats"]["first_answer_s"] == 1.12
    assert tree[3]["stats"]["thinking_tokens"] == 0
    assert tree[3]["stats"]["first_answer_s"] is None


def test_json_round_trip_is_exact(tmp_path: Path) -> None:
    conv = conversation()
    text = to_json(conv, {"temperature": 0.6})
    imported, sampling = parse_import(text)
    assert [(m.content, m.thinking, m.stats) for m in imported.messages] == [
        (m.content, m.thinking, m.stats) for m in conv.messages
    ]
    assert to_json(imported, sampling) == text
    # And through the store.
    with Store(tmp_path / "c.db") as store:
        conv_id = store.import_conversation(imported, sampling)
        assert to_json(store.get_conversation(conv_id), sampling) == text


def test_a_file_from_before_thinking_imports_without_it() -> None:
    data = json.loads(to_json(conversation(), {}))
    for entry in data["kvchat"]["tree"]:
        entry.pop("reasoning_content", None)
        if entry["stats"]:
            del entry["stats"]["thinking_tokens"], entry["stats"]["first_answer_s"]
    imported, _ = parse_import(json.dumps(data))
    reply = imported.messages[1]
    assert (reply.content, reply.thinking) == (ANSWER, "")
    assert reply.stats == STATS


ANSWERED = [{"role": "user", "content": "2+2?"}]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reasoning_content", "Two plus two.\n"),  # OpenAI-style APIs, llama-server, DeepSeek
        ("reasoning_content", "\nTwo plus two.\n"),  # llama-server, R1 template: a newline first
        ("reasoning", "Two plus two.\n"),  # vLLM
        ("thinking", "Two plus two.\n"),  # Ollama's /api/chat
    ],
)
def test_thinking_from_other_tools_is_read(field: str, value: str) -> None:
    reply = {"role": "assistant", "content": "Four.", field: value}
    for text in (json.dumps([*ANSWERED, reply]), json.dumps({"messages": [*ANSWERED, reply]})):
        imported, _ = parse_import(text)
        assert (imported.messages[1].content, imported.messages[1].thinking) == (
            "Four.",
            "Two plus two.\n",
        )


def test_the_first_field_with_thinking_wins_and_null_is_none() -> None:
    reply = {"role": "assistant", "content": "4", "reasoning_content": None, "reasoning": "vllm"}
    imported, _ = parse_import(json.dumps([*ANSWERED, reply]))
    assert imported.messages[1].thinking == "vllm"
    reply = {"role": "assistant", "content": "4", "reasoning_content": "", "thinking": None}
    imported, _ = parse_import(json.dumps([*ANSWERED, reply]))
    assert imported.messages[1].thinking == ""


def test_only_replies_have_thinking() -> None:
    messages = [{"role": "user", "content": "2+2?", "thinking": "not a reply's"}]
    imported, _ = parse_import(json.dumps(messages))
    assert imported.messages[0].thinking == ""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"reasoning_content": 7}, 'message 2\'s "reasoning_content" is not a string'),
        ({"reasoning": ["a"]}, 'message 2\'s "reasoning" is not a string'),
        ({"thinking": {"text": "a"}}, 'message 2\'s "thinking" is not a string'),
    ],
)
def test_thinking_that_is_not_text_is_refused(change: dict[str, object], expected: str) -> None:
    reply = {"role": "assistant", "content": "4", **change}
    with pytest.raises(ImportFormatError) as caught:
        parse_import(json.dumps([*ANSWERED, reply]))
    assert str(caught.value) == f"Cannot import this conversation: {expected}."


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        ({"thinking_tokens": -1}, '"thinking_tokens" that is not a whole number'),
        ({"thinking_tokens": 31}, '"thinking_tokens" that is not a whole number'),
        ({"thinking_tokens": 2.5}, '"thinking_tokens" that is not a whole number'),
        ({"first_answer_s": "soon"}, '"first_answer_s" that is not a number'),
        ({"first_answer_s": True}, '"first_answer_s" that is not a number'),
    ],
)
def test_bad_thinking_stats_are_refused(stats: dict[str, object], expected: str) -> None:
    data = json.loads(to_json(conversation(), {}))
    data["kvchat"]["tree"][1]["stats"].update(stats)
    with pytest.raises(ImportFormatError) as caught:
        parse_import(json.dumps(data))
    assert expected in str(caught.value) and "message 2" in str(caught.value)
