"""A model's chat template applied to a conversation: the prompt it sees, as
token ids.

The prompt is rendered with the GGUF's own chat template (plain ChatML when it
has none, or when the user agreed to it for a template that fails) and sent as
token ids, so that the context meter counts exactly what the model sees. A
reply that carries the tokens it was sampled as goes in as those tokens (its
text may tokenize otherwise, and the prompt would then leave the KV cache
there). The special tokens the template writes (`message_markers`) cut a
prompt into pieces that tokenize on their own, so that the next prompt
tokenizes only its new pieces (`pieces`, chat.engine.prompt_tokens).

It reads only the model's vocabulary, never its context: calls need no lock,
but the model must stay loaded meanwhile (the engine sees to that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from chat.engine.chat_template import ChatTemplate
from chat.engine.prompt_tokens import (
    PieceTokenizer,
    PromptPart,
    TokenizeParts,
    spells_whole,
    tokenize_parts,
)
from chat.engine.protocol import ChatMessage, ChatMessages
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import ChatTemplateError, KvchatError
from chat.sanitize import sanitize_line

# Used only when a GGUF carries no chat template: ChatML is the most common format.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatPrompt:
    """The chat template of one loaded model (`llm`, a `llama_cpp.Llama`),
    compiled once, and the prompts it makes."""

    def __init__(self, llm: Any, path: Path, plain_allowed: bool) -> None:
        self._llm = llm
        self._vocab = llm._model.vocab  # for llama_vocab_get_attr
        self.n_vocab = int(llm.n_vocab())
        self._controls: list[str] | None = None
        self.plain_template_reason: str | None = None
        """Why the model's own chat template is not used (plain ChatML is,
        as the user asked with `model.plain_template`), or None."""
        self.formatters = self._templates(path, plain_allowed)
        """The template, by whether it ends with the generation prompt."""
        self.options: dict[str, Any] = {}
        """The template's own options every prompt is rendered with (thinking
        turned off: `{"enable_thinking": False}`); replaced whole, never changed
        in place (prompts are rendered on two threads)."""
        self.reply_opening: bytes | None = None
        self.markers = self.message_markers()
        self.pieces = PieceTokenizer(self.tokenize_text, self.markers)
        """Tokenizes a prompt piece by piece, remembering the last prompt's
        pieces: for one caller at a time (the engine, under its lock)."""
        self.reply_opening = self._find_reply_opening(self.markers)

    def _templates(self, path: Path, plain_allowed: bool) -> dict[bool, ChatTemplate]:
        """The chat template, compiled once per mode (tokenize_chat runs on the
        UI thread and the engine thread at once: no state shared between them)
        and tried on one message, the least any conversation needs. A template
        that fails raises `ChatTemplateError`, unless `plain_allowed`: then
        plain ChatML is used instead."""
        source = self._llm.metadata.get("tokenizer.chat_template") or CHATML_TEMPLATE
        self.source = source
        """The template's text (how a reasoning model thinks is read from it)."""
        try:
            templates = {flag: self._template(path, source, flag) for flag in (True, False)}
            templates[True](messages=[{"role": "user", "content": "Hello"}])
        except ChatTemplateError as error:
            if not plain_allowed or source == CHATML_TEMPLATE:
                raise
            self.plain_template_reason = str(error)
            self.source = CHATML_TEMPLATE
            return {flag: self._template(path, CHATML_TEMPLATE, flag) for flag in (True, False)}
        return templates

    def _template(self, path: Path, source: str, add_generation_prompt: bool) -> ChatTemplate:
        return ChatTemplate(
            source,
            model=sanitize_line(path.name),
            eos_token=self._token_text(self._llm.token_eos()),
            bos_token=self._token_text(self._llm.token_bos()),
            add_generation_prompt=add_generation_prompt,
        )

    def tokens(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool = True,
        tokenize: TokenizeParts | None = None,
        open_last: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> list[int]:
        """`messages` rendered with the chat template and tokenized: whole, or
        by `tokenize` (the engine's `pieces`, which remembers the pieces of the
        last prompt). `open_last`: the last message is a reply cut short, to be
        continued (no end-of-turn after it). `tools`: the tools offered,
        rendered by the template as it renders `tools`."""
        extra = {"tools": [tool.for_template() for tool in tools]} if tools else {}
        if open_last:
            parts, add_bos = self._open_reply_parts(messages, extra)
        else:
            parts, add_bos = self._prompt_parts(messages, add_generation_prompt, extra)
        if tokenize is None:
            return tokenize_parts(self.tokenize_text, parts, add_bos)
        return tokenize(parts, add_bos)

    def _prompt_parts(
        self,
        messages: ChatMessages,
        add_generation_prompt: bool,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[list[PromptPart], bool]:
        """`messages` rendered with the chat template, as parts to tokenize,
        and whether a BOS goes first.

        A reply that carries the tokens it was sampled as is sent as those
        tokens: its text may tokenize otherwise (" 1." sampled as " 1", "."),
        and the prompt would then leave the KV cache at that point. The
        template renders a placeholder in its place; the text before it ends
        with the generation prompt's last piece (`<|im_start|>assistant\n`),
        tokenized as it was when the reply was sampled, and the rest after it
        is tokenized on its own. When the template does not place the reply's
        text there unchanged, the whole text is tokenized as usual."""
        render = self.formatters[add_generation_prompt]
        # The template sees role and content only (and a reply's thinking),
        # with the model's own options (thinking on or off) and the tools.
        shown = self._shown(messages)
        options = {**self.options, **(extra or {})}
        rendered = render(messages=shown, **options)
        text = rendered.prompt.encode("utf-8")
        add_bos = not rendered.added_special
        sampled = {i: ids for i, m in enumerate(messages) if (ids := self._reply_tokens(m))}
        if not sampled:
            return [text], add_bos
        whole = {i for i in sampled if messages[i].get("sampled_whole")}
        # A reply sent whole (thinking kept) is its tokens alone: the template
        # writes nothing of its thinking around them.
        marked = [
            (
                {k: v for k, v in m.items() if i not in whole or k != "reasoning_content"}
                | {"content": _reply_placeholder(i)}
            )
            if i in sampled
            else m
            for i, m in enumerate(shown)
        ]
        layout = render(messages=marked, **options).prompt.encode("utf-8")
        parts: list[PromptPart] = []
        spelled = b""  # the text the parts stand for
        for i, ids in sampled.items():
            before, found, layout = layout.partition(_reply_placeholder(i).encode("utf-8"))
            if not found or self.reply_opening is None or not before.endswith(self.reply_opening):
                return [text], add_bos
            parts += [before, ids]
            spelled += before + str(shown[i]["content"]).encode("utf-8")
        parts.append(layout)
        # (A reply sent whole is not what the template writes of it: that
        # rendering drops its thinking, on purpose.)
        if not whole and spelled + layout != text:
            return [text], add_bos
        return parts, add_bos

    def _open_reply_parts(
        self, messages: ChatMessages, extra: Mapping[str, Any] | None = None
    ) -> tuple[list[PromptPart], bool]:
        """The prompt that goes on with the last message, a reply cut short: the
        conversation rendered as history, cut right after that reply's text, so
        that no end-of-turn token closes it. The reply goes in as its sampled
        tokens when it has them (the KV cache still holds them: only the last
        one is evaluated), else as text. Raises `KvchatError` when the template
        does not write the reply's text as it is."""
        if not messages or messages[-1].get("role") != "assistant":
            raise KvchatError("Only a reply can be continued.")
        last = len(messages) - 1
        if messages[last].get("sampled_whole"):
            return self._whole_reply_parts(messages, extra)
        # Earlier replies go in as the reply's own prompt sent them: as the
        # template writes them, or whole with their thinking (`sampled_whole`,
        # the setting `keep_thinking`), so the KV cache still holds them.
        head = [*messages[:last], {"role": "assistant", "content": _reply_placeholder(last)}]
        # The history before the reply, as a reply's prompt sends it (sampled
        # tokens and all): the text before the placeholder.
        extra = extra or {}
        parts, add_bos = self._prompt_parts(head, False, extra)
        marker = _reply_placeholder(last).encode("utf-8")
        before = _cut_at(parts, marker)
        render = self.formatters[False]
        options = {**self.options, **extra}
        full = render(messages=self._shown(messages), **options).prompt.encode("utf-8")
        content = str(messages[last].get("content", "")).encode("utf-8")
        # Checked on the template's own text (a reply sent whole is not what
        # the template writes of it): the reply's text follows the history
        # unchanged.
        layout = render(messages=self._shown(head), **options).prompt.encode("utf-8")
        written = layout.partition(marker)[0]
        if before is None or not full.startswith(written + content):
            raise KvchatError(
                "This model's chat template changes a reply's text, so a reply "
                "cannot be continued with it."
            )
        ids = self._reply_tokens(messages[last], after_opening=False)
        if ids is not None and before and isinstance(before[-1], bytes):
            opening = self.reply_opening
            # After the reply's opening, or after the very generation prompt it
            # was sampled after (Qwen3's with thinking off writes a last reply
            # after an empty thinking block, as its generation prompt ends).
            if (opening is not None and before[-1].endswith(opening)) or before == (
                self._prompt_parts(messages[:last], True, extra)[0]
            ):
                return [*before, ids], add_bos
        # As text, with the opening before it, as the whole prompt would tokenize.
        if before and isinstance(before[-1], bytes):
            return [*before[:-1], before[-1] + content], add_bos
        return [*before, content], add_bos

    def _shown(self, messages: ChatMessages) -> list[dict[str, Any]]:
        """The messages as the template sees them: without the sampled tokens
        (and whether they stand for the whole reply), and a tool's result with
        no text that would tokenize as a control token (`<|im_end|>`,
        `<|eot_id|>`): a result is a stranger's text, and must not close its
        message and forge another."""
        shown = []
        for message in messages:
            item = {k: v for k, v in message.items() if k not in _NOT_SHOWN}
            content = item.get("content")
            if item.get("role") == "tool" and isinstance(content, str):
                item["content"] = self.defuse_control_text(content)
            shown.append(item)
        return shown

    def defuse_control_text(self, text: str) -> str:
        """`text` with a zero-width space after the first character of every
        control token's text in it, so that it tokenizes as plain text."""
        for control in self._control_texts():
            if control in text:
                text = text.replace(control, control[0] + "\u200b" + control[1:])
        return text

    def _control_texts(self) -> list[str]:
        """The texts of the vocabulary's control tokens, longest first
        (read once, when a tool's result is first rendered)."""
        if self._controls is None:
            texts = set()
            for token_id in range(self.n_vocab):
                attributes = llama_cpp.llama_vocab_get_attr(self._vocab, token_id)
                if attributes & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
                    text = self._token_text(token_id)
                    if len(text) > 1:
                        texts.add(text)
            self._controls = sorted(texts, key=len, reverse=True)
        return self._controls

    def _whole_reply_parts(
        self, messages: ChatMessages, extra: Mapping[str, Any] | None = None
    ) -> tuple[list[PromptPart], bool]:
        """The prompt that goes on with a reply that thought, sent whole (its
        content is all of it as the model wrote it, markers and thinking
        included): the prompt it was generated from, then the reply, as its
        sampled tokens when they spell it (the KV cache holds exactly these),
        else as text. So a reply cut mid-thought goes on inside its thought."""
        parts, add_bos = self._prompt_parts(messages[:-1], True, extra)
        # After the generation prompt, as when they were sampled.
        ids = self._reply_tokens(messages[-1], after_opening=False)
        if ids is not None:
            return [*parts, ids], add_bos
        content = str(messages[-1].get("content", "")).encode("utf-8")
        if parts and isinstance(parts[-1], bytes):
            return [*parts[:-1], parts[-1] + content], add_bos
        return [*parts, content], add_bos

    def _reply_tokens(
        self, message: ChatMessage | Mapping[str, str], after_opening: bool = True
    ) -> list[int] | None:
        """A reply's sampled tokens, when they can stand for its text: every id
        in this model's vocabulary, and together they spell the content exactly
        (not so for another model's ids, an edited reply, a damaged row), or
        end with it for a reply sent whole (`sampled_whole`: they spell its
        thinking too; whitespace aside, which the parts of a reply that
        thought are stripped of). `after_opening`: only where the template writes a
        reply right after the generation prompt's last piece."""
        ids = message.get("token_ids")
        content = message.get("content")
        if (
            (after_opening and self.reply_opening is None)
            or message.get("role") != "assistant"
            or not isinstance(ids, (list, tuple))
            or not ids
            or not isinstance(content, str)
        ):
            return None
        n_vocab = self.n_vocab
        if not all(type(i) is int and 0 <= i < n_vocab for i in ids):
            return None
        spelled, text = self.spell(ids), content.encode("utf-8")
        if spelled != text and not (message.get("sampled_whole") and spells_whole(spelled, text)):
            return None
        return list(ids)

    def spell(self, ids: Sequence[int]) -> bytes:
        """The text of `ids`, special tokens written out (so that they never
        pass for text that does not contain them)."""
        return bytes(self._llm.detokenize(list(ids), special=True))

    def _find_reply_opening(self, markers: list[tuple[bytes, int]]) -> bytes | None:
        """The generation prompt's last piece (`<|im_start|>assistant\n` in
        ChatML), when the template writes a reply's text right after it: then
        a reply's sampled tokens can follow it in a later prompt. None when it
        does not (or no markers cut the prompt): replies are sent as text."""
        placeholder = _reply_placeholder(0)
        for roles in (("user",), ("system", "user")):
            asked = [{"role": r, "content": "x"} for r in roles]
            # Followed by a question, as a reply is in every later prompt (a
            # reasoning template writes the last reply otherwise: Qwen3 gives
            # it an empty thinking block).
            answered = [
                *asked,
                {"role": "assistant", "content": placeholder},
                {"role": "user", "content": "y"},
            ]
            try:
                prompt = self.formatters[True](messages=asked).prompt
                history = self.formatters[False](messages=answered).prompt
            except Exception:  # some templates refuse one shape or the other
                continue
            if not history.startswith(prompt + placeholder):
                return None
            opening = prompt.encode("utf-8")
            start = max((opening.rfind(marker) for marker, _ in markers), default=-1)
            return opening[start:] if start >= 0 else None
        return None

    def tokenize_text(self, text: bytes, add_bos: bool) -> list[int]:
        return list(self._llm.tokenize(text, add_bos=add_bos, special=True))

    def message_markers(self) -> list[tuple[bytes, int]]:
        """The special tokens the chat template writes (e.g. `<|im_start|>`),
        where a prompt can be cut into pieces that tokenize on their own.

        Tokens that strip the whitespace before them are left out: that
        whitespace ends the piece before, which would then tokenize otherwise."""
        probe_tokens: list[int] = []
        for roles in (("system", "user", "assistant", "user"), ("user", "assistant", "user")):
            try:  # some templates refuse a system message, or raise on other shapes
                probe_tokens = self.tokens([{"role": r, "content": "x"} for r in roles])
                break
            except Exception:  # then no markers: prompts are tokenized whole
                continue
        markers = []
        for token_id in set(probe_tokens):
            attributes = llama_cpp.llama_vocab_get_attr(self._vocab, token_id)
            if attributes & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL and not (
                attributes & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP
            ):
                text = bytes(self._llm.detokenize([token_id], special=True))
                if text:
                    markers.append((text, token_id))
        return markers

    def _token_text(self, token_id: int) -> str:
        if token_id < 0:
            return ""
        return bytes(self._llm.detokenize([token_id], special=True)).decode("utf-8", "replace")


_NOT_SHOWN = ("token_ids", "sampled_whole")
"""Keys of a `ChatMessage` that are kvchat's, not the template's."""


def _reply_placeholder(index: int) -> str:
    """Text a template renders in place of message `index`'s content, to find
    where that content goes (private-use characters: no message has them)."""
    return f"\ue000kvchat reply {index}\ue001"


def _cut_at(parts: Sequence[PromptPart], marker: bytes) -> list[PromptPart] | None:
    """`parts` up to where `marker` first appears in a text part (the marker
    and what follows left out); None when no text part holds it."""
    for index, part in enumerate(parts):
        if isinstance(part, bytes) and marker in part:
            return [*parts[:index], part[: part.index(marker)]]
    return None
