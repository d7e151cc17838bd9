"""Tokenizing prompts piece by piece gives what tokenizing them whole gives."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chat.engine.llama import LlamaEngine
from chat.engine.prompt_tokens import PieceTokenizer, tokenize_parts
from chat.engine.protocol import ChatMessage

AWKWARD = [
    "",
    " leading and trailing spaces ",
    "\n\nblank lines\n\n",
    "naïve café — 東京 🚀 emoji",
    "a literal <|im_start|>user\nmarker inside a message<|im_end|>",
    "<|im_end|>",
    "```python\nprint('code')\n```",
]


def word_tokenizer(calls: list[bytes]) -> Callable[[bytes, bool], list[int]]:
    """A tokenizer to test the cutting with: 0 for a BOS, 1 for `<s>`, a word's
    length + 10 for each word; each text it is given is added to `calls`."""

    def tokenize(text: bytes, add_bos: bool) -> list[int]:
        calls.append(text)
        ids = [0] if add_bos else []
        for part in text.replace(b"<s>", b" <s> ").split():
            ids.append(1 if part == b"<s>" else len(part) + 10)
        return ids

    return tokenize


def conversation(contents: list[str]) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for index, content in enumerate(contents):
        messages.append({"role": "user" if index % 2 == 0 else "assistant", "content": content})
    return messages


@pytest.mark.model
def test_pieces_match_whole_tokenization_turn_after_turn(engine: LlamaEngine) -> None:
    pieces = PieceTokenizer(engine.chat_prompt.tokenize_text, engine.chat_prompt.message_markers())
    contents: list[str] = []
    for turn, text in enumerate(AWKWARD * 2):
        contents.append(text)
        messages = conversation(contents)
        for generation_prompt in (True, False):
            whole = engine.tokenize_chat(messages, generation_prompt)
            assert engine.chat_prompt.tokens(messages, generation_prompt, pieces) == whole, turn


@pytest.mark.model
def test_an_edited_earlier_message_is_tokenized_again(engine: LlamaEngine) -> None:
    pieces = PieceTokenizer(engine.chat_prompt.tokenize_text, engine.chat_prompt.message_markers())
    first = conversation(["Hello there", "Hi! How can I help?", "Tell me a story"])
    engine.chat_prompt.tokens(first, True, pieces)
    edited = conversation(["Hello here", "Hi! How can I help?", "Tell me a story"])
    assert engine.chat_prompt.tokens(edited, True, pieces) == engine.tokenize_chat(edited)


@pytest.mark.model
def test_the_template_markers_are_found(engine: LlamaEngine) -> None:
    # SmolLM2 is ChatML: every message opens and closes with a special token.
    markers = engine.chat_prompt.message_markers()
    assert sorted(markers) == [(b"<|im_end|>", 2), (b"<|im_start|>", 1)]


def test_only_new_pieces_are_tokenized() -> None:
    calls: list[bytes] = []

    tokenize = word_tokenizer(calls)
    pieces = PieceTokenizer(tokenize, [(b"<s>", 1)])
    assert pieces([b"intro<s>one two<s>three"], True) == [0, 15, 1, 13, 13, 1, 15]
    calls.clear()
    assert pieces([b"intro<s>one two<s>three<s>four"], True) == [0, 15, 1, 13, 13, 1, 15, 1, 14]
    assert calls == [b"<s>four"]


def test_a_cut_llama_cpp_would_not_make_falls_back_to_the_whole_text() -> None:
    def tokenize(text: bytes, add_bos: bool) -> list[int]:
        # "<s>" is only special when not followed by "x" here.
        return [2 if text.startswith(b"<s>x") else 1] + [9] * (len(text) // 4)

    pieces = PieceTokenizer(tokenize, [(b"<s>", 1)])
    assert pieces([b"<s>xyz"], False) == tokenize(b"<s>xyz", False)


def test_no_markers_means_whole_text() -> None:
    pieces = PieceTokenizer(lambda text, add_bos: [len(text)], [])
    assert pieces([b"abc"], False) == [3]


@pytest.mark.model
def test_a_template_that_refuses_the_probe_leaves_prompts_whole(
    engine: LlamaEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(messages: object, add_generation_prompt: bool = True) -> list[int]:
        raise ValueError("Conversation roles must alternate user/assistant/user/assistant")

    monkeypatch.setattr(engine.chat_prompt, "tokens", refuse)
    assert engine.chat_prompt.message_markers() == []


def test_a_bos_before_the_first_piece_is_not_a_wrong_cut() -> None:
    calls: list[bytes] = []

    def tokenize(text: bytes, add_bos: bool) -> list[int]:
        calls.append(text)
        return ([7] if add_bos else []) + [1 if part == b"<s>" else 5 for part in text.split(b"|")]

    pieces = PieceTokenizer(tokenize, [(b"<s>", 1)])
    assert pieces([b"<s>|a"], True) == [7, 1, 5]
    calls.clear()
    assert pieces([b"<s>|a<s>|b"], True) == [7, 1, 5, 1, 5]
    assert calls == [b"<s>|b"]  # the first piece was reused: its BOS is no wrong cut


def test_token_parts_go_in_as_they_are() -> None:
    calls: list[bytes] = []

    tokenize = word_tokenizer(calls)
    pieces = PieceTokenizer(tokenize, [(b"<s>", 1)])
    first = [b"<s>a<s>", [7, 8], b"<s>b"]
    assert pieces(first, True) == [0, 1, 11, 1, 7, 8, 1, 11]
    assert tokenize_parts(tokenize, first, True) == pieces(first, True)
    calls.clear()
    # Text right after the tokens is tokenized on its own, not a wrong cut.
    second = [b"<s>a<s>", [7, 8], b"c<s>b<s>d"]
    assert pieces(second, True) == [0, 1, 11, 1, 7, 8, 11, 1, 11, 1, 11]
    assert calls == [b"c", b"<s>d"]  # the other pieces were remembered
    assert tokenize_parts(tokenize, second, True) == pieces(second, True)


@pytest.mark.model
def test_pieces_match_whole_tokenization_with_sampled_replies(engine: LlamaEngine) -> None:
    pieces = PieceTokenizer(engine.chat_prompt.tokenize_text, engine.chat_prompt.message_markers())
    messages: list[ChatMessage] = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn, text in enumerate(AWKWARD * 2):
        if turn % 2 == 0:
            messages.append({"role": "user", "content": text})
        else:
            # As a model may sample it: one character at a time where it can.
            tokenize = engine.chat_prompt.tokenize_text
            ids = [i for char in text for i in tokenize(char.encode(), False)]
            messages.append({"role": "assistant", "content": text, "token_ids": ids})
        for generation_prompt in (True, False):
            whole = engine.tokenize_chat(messages, generation_prompt)
            assert engine.chat_prompt.tokens(messages, generation_prompt, pieces) == whole, turn
