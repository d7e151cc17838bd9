"""Reasoning models: the markers found from a model's template and
vocabulary, and a reply split into thinking and answer as it streams, on
crafted pieces and on the demo model's real tokens (see reasoning_models)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp
import pytest

from chat.engine.chat_template import ChatTemplate
from chat.engine.protocol import TokenEvent
from chat.engine.reasoning.markers import (
    KNOWN_MARKERS,
    THINK,
    Reasoning,
    ThinkingMarkers,
    find_markers,
    generation_prompt_opens_block,
    prompt_opens_block,
    recognise,
    special_token_test,
)
from chat.engine.reasoning.server_fields import openai_chunk_parts
from chat.engine.reasoning.splitter import ReplyPart, ThinkingSplitter, token_parts
from chat.engine.reply_text import ReplyText
from tests.engine.reasoning_models import (
    DEEPSEEK_R1_TEMPLATE,
    OPENED_GRAMMAR,
    QWEN3_TEMPLATE,
    THINKING_GRAMMAR,
    deepseek_r1_model,
    qwen3_model,
)
from tests.servers import RunningServer, llama_server

GPT_OSS = next(m for m in KNOWN_MARKERS if "channel" in m.open)


def split(
    markers: ThinkingMarkers | None, pieces: list[str], starts_inside: bool = False
) -> ThinkingSplitter:
    splitter = ThinkingSplitter(markers, starts_inside)
    for piece in pieces:
        splitter.feed(piece, 1)
    splitter.flush()
    return splitter


def chars(text: str) -> list[str]:
    return list(text)


# --- the splitter, on crafted pieces ---------------------------------------------------


REPLY = "<think>\nThe user greets me.\n</think>\n\nHello there!"


@pytest.mark.parametrize(
    "pieces",
    [
        [REPLY],
        chars(REPLY),
        ["<th", "ink>\nThe user", " greets me.\n</", "think", ">\n\nHello", " there!"],
    ],
)
def test_thinking_then_answer_in_any_pieces(pieces: list[str]) -> None:
    splitter = split(THINK, pieces)
    assert splitter.thinking == "The user greets me.\n"
    assert splitter.answer == "Hello there!"
    assert not splitter.in_thinking and splitter.saw_thinking
    assert splitter.thinking_tokens + splitter.answer_tokens == len(pieces)


@pytest.mark.parametrize(
    ("markers", "reply", "starts_inside"),
    [
        (THINK, REPLY, False),
        (THINK, "So 2 + 2 is 4.</think>\n\n4", True),
        (
            GPT_OSS,
            "<|channel|>analysis<|message|>2+2<|end|><|start|>assistant<|channel|>final<|message|>4",
            False,
        ),
    ],
)
def test_every_cut_into_three_pieces_splits_alike(
    markers: ThinkingMarkers, reply: str, starts_inside: bool
) -> None:
    whole = split(markers, [reply], starts_inside)
    for first in range(len(reply) + 1):
        for second in range(first, len(reply) + 1):
            pieces = [reply[:first], reply[first:second], reply[second:]]
            cut = split(markers, pieces, starts_inside)
            assert (cut.thinking, cut.answer) == (whole.thinking, whole.answer), pieces
            assert cut.thinking_tokens + cut.answer_tokens == 3


def test_parts_stream_as_they_become_known() -> None:
    splitter = ThinkingSplitter(THINK)
    assert splitter.feed("<thi", 1) == []  # may be the marker: held
    assert splitter.feed("nk>Let me", 1) == [ReplyPart("thinking", "Let me", 2)]
    assert splitter.feed(" see</th", 1) == [ReplyPart("thinking", " see", 1)]
    assert splitter.feed("ink>Yes", 1) == [
        ReplyPart("thinking", "", 1),
        ReplyPart("answer", "Yes", 0),
    ]
    # The answer part's own token was counted when it was known to be answer.
    assert splitter.flush() == [] and splitter.answer_tokens == 0
    assert splitter.thinking_tokens == 4


def test_text_that_starts_after_a_closed_thought_is_the_answer() -> None:
    """A reply cut as its thought closed, continued: what comes is its answer,
    leading blank lines and the answer's lead marker not shown, and a marker
    quoted in it is text; the thought stays closed."""
    for markers, lead in ((THINK, ""), (GPT_OSS, "<|start|>assistant<|channel|>final<|message|>")):
        for pieces in (
            ["\n\n", "Four", " <think> is a tag."],
            [f"{lead}\n", "Four <think> is a tag."],
        ):
            splitter = ThinkingSplitter(markers, starts_after=True)
            for piece in pieces:
                splitter.feed(piece, 1)
            splitter.flush()
            assert (splitter.thinking, splitter.answer) == ("", "Four <think> is a tag."), pieces
            assert splitter.saw_thinking and not splitter.in_thinking
            assert (splitter.thinking_tokens, splitter.answer_tokens) == (0, len(pieces))


def test_nothing_is_held_once_it_cannot_be_a_marker() -> None:
    plain = ThinkingSplitter(THINK)
    assert plain.feed("Hel", 1) == [ReplyPart("answer", "Hel", 1)]
    answering = ThinkingSplitter(THINK)
    answering.feed("<think>hm</think>Yes", 3)
    assert answering.feed(" <think> and </", 1) == [ReplyPart("answer", " <think> and </", 1)]


def test_tokens_go_to_the_part_they_spell() -> None:
    splitter = ThinkingSplitter(THINK)
    # A token that ends mid-character spells "" until the next one: it counts
    # with the text that follows it.
    for piece in ["<think>", "a", "", "b", "</think>", "", "\n\n", "X", "Y", "Z"]:
        splitter.feed(piece, 1)
    splitter.flush()
    assert (splitter.thinking_tokens, splitter.answer_tokens) == (5, 5)


def test_each_token_goes_to_the_server_field_else_the_markers_else_the_answer() -> None:
    # The one decision the chat's reply stream and one-shot mode share.
    server_thought = TokenEvent("hm", 7, thinking=True)
    assert token_parts(server_thought, ThinkingSplitter(THINK)) == [ReplyPart("thinking", "hm", 1)]
    assert token_parts(TokenEvent("<think>", 3), None) == [ReplyPart("answer", "<think>", 1)]
    splitter = ThinkingSplitter(THINK)
    assert token_parts(TokenEvent("<think>", 3), splitter) == [ReplyPart("thinking", "", 1)]
    assert token_parts(TokenEvent("a</think>b", 4), splitter) == [
        ReplyPart("thinking", "a", 1),
        ReplyPart("answer", "b", 0),
    ]
    # Text the engine held back and released at the end spells no token.
    assert token_parts(TokenEvent("!", -1), None) == [ReplyPart("answer", "!", 0)]


def test_reply_that_starts_inside_a_block_the_prompt_opened() -> None:
    splitter = split(THINK, chars("Okay, so 2 + 2.\n</think>\n\n4"), starts_inside=True)
    assert (splitter.thinking, splitter.answer) == ("Okay, so 2 + 2.\n", "4")


def test_a_model_that_opens_the_block_the_prompt_already_opened() -> None:
    splitter = split(THINK, chars("<think>\nhm</think>ok"), starts_inside=True)
    assert (splitter.thinking, splitter.answer) == ("hm", "ok")


def test_reply_stopped_mid_thought_keeps_the_thought_and_says_so() -> None:
    splitter = split(THINK, chars("<think>\nFirst, the sky scatters</th"))
    assert splitter.in_thinking
    assert splitter.thinking == "First, the sky scatters</th"  # the held end is released
    assert splitter.answer == ""


def test_no_thinking_at_all() -> None:
    for markers in (THINK, None):
        splitter = split(markers, chars("  Hello, <think> is a tag."))
        assert splitter.thinking == "" and not splitter.saw_thinking
        assert splitter.answer == "Hello, <think> is a tag."
        assert splitter.answer_tokens == len("  Hello, <think> is a tag.")


def test_a_marker_later_in_the_answer_is_answer_text() -> None:
    splitter = split(THINK, ["<think>a</think>Use ", "</think> to close."])
    assert splitter.answer == "Use </think> to close."


def test_a_short_reply_that_looks_like_the_start_of_a_marker() -> None:
    assert split(THINK, ["<"]).answer == "<"
    assert split(THINK, ["<thi"]).answer == "<thi"


def test_gpt_oss_channels() -> None:
    reply = (
        "<|channel|>analysis<|message|>User asks 2+2.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>4"
    )
    splitter = split(GPT_OSS, chars(reply))
    assert (splitter.thinking, splitter.answer) == ("User asks 2+2.", "4")
    final = "<|channel|>final<|message|>"
    for direct in (final + "Hi", "<|start|>assistant" + final + "Hi"):
        splitter = split(GPT_OSS, chars(direct))
        assert (splitter.thinking, splitter.answer) == ("", "Hi")


# --- recognition -------------------------------------------------------------------------


DEMO_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)


def template(source: str) -> ChatTemplate:
    return ChatTemplate(source, model="test", eos_token="<|im_end|>", bos_token="<|im_start|>")


def test_markers_come_from_the_template_text() -> None:
    assert find_markers(QWEN3_TEMPLATE) == (THINK, "template")
    assert find_markers(DEEPSEEK_R1_TEMPLATE) == (THINK, "template")
    magistral = "{{ '[THINK]' }}{{ m.content.split('[/THINK]')[-1] }}"
    assert find_markers(magistral) == (
        next(m for m in KNOWN_MARKERS if m.open == "[THINK]"),
        "template",
    )
    gpt_oss = (
        "<|channel|>analysis<|message|>{{ m.thinking }}<|end|><|start|>assistant<|channel|>final"
    )
    assert find_markers(gpt_oss) == (GPT_OSS, "template")
    assert find_markers(DEMO_LIKE) is None


def test_markers_come_from_the_vocabulary_when_the_template_is_silent() -> None:
    special = {"<think>", "</think>"}
    assert find_markers(DEMO_LIKE, special.__contains__) == (THINK, "vocabulary")
    assert find_markers(None, special.__contains__) == (THINK, "vocabulary")


def test_special_tokens_of_a_real_vocabulary(demo_model: Path) -> None:
    llm = llama_cpp.Llama(str(demo_model), n_ctx=256, vocab_only=True, verbose=False)
    is_special = special_token_test(llm.tokenize)
    assert is_special("<|im_start|>")
    assert not is_special("<think>")  # the demo model's vocabulary has no thinking tokens
    assert find_markers(DEMO_LIKE, is_special) is None


def test_which_generation_prompt_opens_the_block() -> None:
    assert not generation_prompt_opens_block(template(QWEN3_TEMPLATE), THINK)
    # Thinking off: the prompt holds an empty, closed block.
    assert not generation_prompt_opens_block(template(QWEN3_TEMPLATE), THINK, enable_thinking=False)
    assert generation_prompt_opens_block(template(DEEPSEEK_R1_TEMPLATE), THINK)
    assert recognise(DEEPSEEK_R1_TEMPLATE, template(DEEPSEEK_R1_TEMPLATE)) == Reasoning(
        THINK, "template", True
    )
    assert recognise(DEMO_LIKE, template(DEMO_LIKE)) is None


def test_a_template_that_cannot_render_a_question_still_has_its_markers() -> None:
    failing = "{{ raise_exception('System prompt required') }}<think>{# </think> #}"
    assert recognise(failing, template(failing)) == Reasoning(THINK, "template", False)


def test_what_the_templates_keep_of_earlier_thinking() -> None:
    first = {"role": "assistant", "content": "<think>\nsecret plan\n</think>\n\nFour."}
    history = [{"role": "user", "content": "2+2?"}, first, {"role": "user", "content": "And 3+3?"}]
    for source in (QWEN3_TEMPLATE, DEEPSEEK_R1_TEMPLATE):
        prompt = template(source).render(history)
        assert "Four." in prompt and "secret plan" not in prompt
    # Qwen3 keeps the thinking of a reply after the last question (a reply continued).
    continued = template(QWEN3_TEMPLATE).render(history[:2])
    assert "<think>\nsecret plan\n</think>\n\nFour." in continued
    # And takes it from the OpenAI-style field as well as from the text.
    by_field = [history[0], {"role": "assistant", "content": "Four.", "reasoning_content": "plan"}]
    assert "<think>\nplan\n</think>\n\nFour." in template(QWEN3_TEMPLATE).render(by_field)


# --- the demo model's real tokens --------------------------------------------------------

GRAMMARS = {"qwen3": THINKING_GRAMMAR, "r1": OPENED_GRAMMAR}
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]


@dataclass
class RealReply:
    pieces: list[str]
    sampled: int
    splitter: ThinkingSplitter


@pytest.fixture(scope="module")
def reasoning_models(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("reasoning")
    return {"qwen3": qwen3_model(demo_model, folder), "r1": deepseek_r1_model(demo_model, folder)}


@pytest.fixture(scope="module")
def models_loaded(reasoning_models: dict[str, Path]) -> Iterator[dict[str, llama_cpp.Llama]]:
    loaded = {
        name: llama_cpp.Llama(str(path), n_ctx=512, verbose=False)
        for name, path in reasoning_models.items()
    }
    yield loaded
    for llm in loaded.values():
        llm.close()


def real_reply(llm: llama_cpp.Llama, grammar: str, max_tokens: int) -> RealReply:
    """The greedy reply to QUESTION, decoded as kvchat's engine decodes it
    (ReplyText per sampled token), split after the model's template and
    vocabulary are recognised."""
    source = llm.metadata["tokenizer.chat_template"]
    chat_template = template(source)
    reasoning = recognise(source, chat_template, special_token_test(llm.tokenize))
    assert reasoning is not None
    splitter = ThinkingSplitter(reasoning.markers, reasoning.prompt_opens_block)
    prompt = chat_template.render(QUESTION)
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    grammar_object = llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
    text = ReplyText()
    pieces: list[str] = []
    for token in llm.generate(tokens, temp=0, grammar=grammar_object):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token) or len(pieces) == max_tokens:
            break
        pieces.append(text.feed(llm.detokenize([token], special=True)))
        splitter.feed(pieces[-1], 1)
    splitter.feed(text.flush())  # what ReplyText held back spells no token of its own
    splitter.flush()
    return RealReply(pieces, len(pieces), splitter)


@pytest.fixture(scope="module")
def whole_replies(models_loaded: dict[str, llama_cpp.Llama]) -> dict[str, RealReply]:
    return {name: real_reply(llm, GRAMMARS[name], 300) for name, llm in models_loaded.items()}


@pytest.mark.parametrize("name", GRAMMARS)
def test_real_reply_splits_into_thinking_and_answer(
    whole_replies: dict[str, RealReply], name: str
) -> None:
    reply = whole_replies[name]
    splitter = reply.splitter
    raw = "".join(reply.pieces)
    assert raw.count("</think>") == 1
    if name == "qwen3":
        # The demo model's tokens spell `<think>` in pieces, as a model without
        # thinking tokens does.
        assert raw.startswith("<think>") and "<think>" not in reply.pieces
    thought, answer = raw.removeprefix("<think>").split("</think>")
    assert splitter.thinking == thought.lstrip() and splitter.thinking
    assert splitter.answer == answer.lstrip() and splitter.answer[0].isupper()
    assert splitter.thinking_tokens + splitter.answer_tokens == reply.sampled
    assert splitter.answer_tokens >= 3 and splitter.thinking_tokens >= 3
    assert not splitter.in_thinking


@pytest.mark.parametrize("name", GRAMMARS)
def test_real_reply_stopped_mid_thought(
    models_loaded: dict[str, llama_cpp.Llama], name: str
) -> None:
    splitter = real_reply(models_loaded[name], GRAMMARS[name], max_tokens=12).splitter
    assert splitter.in_thinking and splitter.thinking and splitter.answer == ""
    assert splitter.thinking_tokens == 12 and splitter.answer_tokens == 0


# --- llama-server on the same files ------------------------------------------------------


def server_parts(server: RunningServer, name: str) -> list[ReplyPart]:
    body = {
        "messages": QUESTION,
        "stream": True,
        "grammar": GRAMMARS[name],
        "temperature": 0,
        "max_tokens": 300,
    }
    parts: list[ReplyPart] = []
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=300) as sent:
        for line in sent.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                parts += openai_chunk_parts(json.loads(line.removeprefix("data: ")))
    return parts


@pytest.mark.parametrize("name", GRAMMARS)
def test_llama_server_sends_the_thinking_apart(
    reasoning_models: dict[str, Path],
    whole_replies: dict[str, RealReply],
    name: str,
    tmp_path: Path,
) -> None:
    extra = ["--jinja", "--reasoning-format", "deepseek"]
    with llama_server(tmp_path, extra, n_ctx=1024, model=reasoning_models[name]) as server:
        prompt = httpx.post(server.url + "/apply-template", json={"messages": QUESTION}).json()
        parts = server_parts(server, name)
    # The server renders the same generation prompt, opened block or not.
    assert prompt_opens_block(prompt["prompt"], THINK) == (name == "r1")
    kinds = [part.kind for part in parts]
    assert kinds == sorted(kinds, key=["thinking", "answer"].index)  # thinking first
    thinking = "".join(part.text for part in parts if part.kind == "thinking")
    answer = "".join(part.text for part in parts if part.kind == "answer")
    assert "think>" not in thinking + answer  # the markers are the server's to remove
    # The same greedy thought as the local engine's, whitespace aside.
    assert thinking.strip() == whole_replies[name].splitter.thinking.strip()
    assert answer.lstrip()[0].isupper()


@pytest.mark.parametrize("name", GRAMMARS)
def test_kvchat_on_llama_server_tells_the_thinking_from_the_answer(
    reasoning_models: dict[str, Path],
    whole_replies: dict[str, RealReply],
    name: str,
    tmp_path: Path,
) -> None:
    """kvchat's llama-server engine asks /completion for the model's own text,
    markers and all: it recognises the served template's markers (and whether
    its generation prompt opens the block) and the reply stream splits them
    as for a local model."""
    from chat.engine.remote import ServerConfig, connect
    from chat.session.reply_stream import ReplyEnded, ReplyEvent, ReplyStream
    from chat.settings.schema import SamplingSettings

    with llama_server(tmp_path, ["--jinja"], n_ctx=1024, model=reasoning_models[name]) as server:
        engine = connect(ServerConfig(url=server.url, kind="llama-server"))
        try:
            reasoning = engine.info.reasoning
            assert reasoning is not None and reasoning.markers == THINK
            assert reasoning.prompt_opens_block == (name == "r1")
            engine.grammar = GRAMMARS[name]  # type: ignore[attr-defined]
            events: list[ReplyEvent] = []
            sampling = SamplingSettings(temperature=0.0, max_tokens=300)
            stream = ReplyStream(engine, QUESTION, sampling, events.append, reasoning=reasoning)
            stream.start()
            assert stream.join(120)
        finally:
            engine.close()
    (ended,) = [event for event in events if isinstance(event, ReplyEnded)]
    assert ended.thinking.strip() == whole_replies[name].splitter.thinking.strip()
    assert "think>" not in ended.thinking + ended.finished.text
    assert ended.finished.text[0].isupper()
    assert ended.finished.stats.thinking_tokens > 0
