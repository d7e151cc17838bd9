"""Which thinking markers a model uses, and whether its prompt opens the block.

The markers come from the model itself, never from its name: the chat
template's text (a template that renders or strips `<think>` knows its
model thinks) and the vocabulary (markers that are special tokens). The
families are those llama.cpp's chat parsers know (see docs/reasoning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from chat.errors import ChatTemplateError

if TYPE_CHECKING:
    # Only a type here: the template module brings jinja2 (0.05 s to import),
    # and the app imports this module before its first frame.
    from chat.engine.chat_template import ChatTemplate


@dataclass(frozen=True)
class ThinkingMarkers:
    """The text that opens and closes a model's thinking block."""

    open: str
    close: str
    answer_leads: tuple[str, ...] = ()
    """Texts that introduce the answer and are not part of it (gpt-oss's
    final channel header, after its thinking or without it); dropped where
    the answer begins."""


THINK = ThinkingMarkers("<think>", "</think>")
# Most specific first: a template that names gpt-oss's channels may also hold
# other tags in its text, but no template holds `<|channel|>analysis` by chance.
KNOWN_MARKERS: tuple[ThinkingMarkers, ...] = (
    ThinkingMarkers(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        ("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
    ),
    ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>"),  # Command R7B
    ThinkingMarkers("[THINK]", "[/THINK]"),  # Magistral
    ThinkingMarkers("<seed:think>", "</seed:think>"),  # Seed-OSS
    ThinkingMarkers("◁think▷", "◁/think▷"),  # Kimi VL thinking
    ThinkingMarkers("<|begin_of_thought|>", "<|end_of_thought|>", ("<|begin_of_solution|>",)),
    THINK,  # DeepSeek-R1, Qwen3, QwQ, GLM, Kimi K2, LFM2, MiniMax, Nemotron
)


@dataclass(frozen=True)
class Reasoning:
    """What a model does when it thinks."""

    markers: ThinkingMarkers
    found_in: Literal["template", "vocabulary"]
    prompt_opens_block: bool = False
    """The generation prompt ends inside the thinking block: the reply starts
    mid-thought and holds only the closing marker."""
    switch: str | None = None
    """The chat template's variable that turns thinking off when false
    (`enable_thinking`, Qwen3's), when the template has one; None: thinking
    cannot be turned off for this model."""
    enabled: bool = True
    """False: thinking was turned off through `switch` (the generation prompt
    then holds an empty, closed block, and the reply is all answer)."""

    @property
    def options(self) -> dict[str, Any]:
        """What the chat template is rendered with for this: the switch set to
        false when thinking is off (nothing otherwise: a template reads an
        undefined switch as its default)."""
        return {self.switch: False} if self.switch is not None and not self.enabled else {}


def find_markers(
    template: str | None, is_special_token: Callable[[str], bool] = lambda _: False
) -> tuple[ThinkingMarkers, Literal["template", "vocabulary"]] | None:
    """The thinking markers of a model whose chat template is `template`:
    those the template's text names (both ends), else those whose both ends
    are special tokens of its vocabulary; None for a model that does not think."""
    if template:
        for markers in KNOWN_MARKERS:
            if markers.open in template and markers.close in template:
                return markers, "template"
    for markers in KNOWN_MARKERS:
        if is_special_token(markers.open) and is_special_token(markers.close):
            return markers, "vocabulary"
    return None


def special_token_test(
    tokenize: Callable[[bytes, bool, bool], Sequence[int]],
) -> Callable[[str], bool]:
    """`is_special_token` for a llama.cpp model, from its `tokenize(text,
    add_bos, special)`: a special token is one token when special tokens are
    parsed, and several when the same text is read as plain text."""

    def is_special(text: str) -> bool:
        data = text.encode()
        return len(tokenize(data, False, True)) == 1 and len(tokenize(data, False, False)) > 1

    return is_special


SWITCHES = ("enable_thinking",)
"""Template variables that turn thinking off when false, as llama.cpp and the
model servers pass them (`chat_template_kwargs`): Qwen3's and its successors',
GLM-4.5's, Nemotron's."""


def find_switch(template: str | None) -> str | None:
    """The variable of `template` that turns thinking off, if it reads one."""
    return next((name for name in SWITCHES if template and name in template), None)


_PROBE = "kvchat-probe-7f3a"  # a user message no template writes itself


def prompt_opens_block(prompt: str, markers: ThinkingMarkers, after: int = 0) -> bool:
    """Whether the rendered `prompt` ends inside a thinking block: its last
    opening marker after position `after` is not closed."""
    tail = prompt[after:]
    opened = tail.rfind(markers.open)
    return opened >= 0 and tail.find(markers.close, opened) < 0


def generation_prompt_opens_block(
    template: ChatTemplate, markers: ThinkingMarkers, **extra: Any
) -> bool:
    """Render a one-message conversation with the generation prompt (and the
    template's own options in `extra`, such as `enable_thinking`) and say
    whether its tail opens the thinking block. Raises `ChatTemplateError`."""
    return first_prompt_opens_block(lambda messages: template.render(messages, **extra), markers)


def first_prompt_opens_block(
    render: Callable[[list[dict[str, str]]], str], markers: ThinkingMarkers
) -> bool:
    """`generation_prompt_opens_block` for any renderer of a conversation with
    the generation prompt (a model server's, for one); its errors pass through."""
    prompt = render([{"role": "user", "content": _PROBE}])
    after = prompt.rfind(_PROBE)
    return after >= 0 and prompt_opens_block(prompt, markers, after + len(_PROBE))


def recognise(
    template_text: str | None,
    template: ChatTemplate | None,
    is_special_token: Callable[[str], bool] = lambda _: False,
    **extra: Any,
) -> Reasoning | None:
    """Everything above for one model; None when it does not think. A
    template that cannot render a first question is not this module's to
    report (the first turn says why): its prompt is taken as not opening."""
    found = find_markers(template_text, is_special_token)
    if found is None:
        return None
    markers, where = found
    switch = find_switch(template_text)
    reasoning = Reasoning(markers, where, False, switch)
    return with_thinking(reasoning, template, not (switch and extra.get(switch) is False), **extra)


def with_thinking(
    reasoning: Reasoning, template: ChatTemplate | None, enabled: bool, **extra: Any
) -> Reasoning:
    """`reasoning` with thinking on or off (`enabled`; off only where the
    template has a switch), and whether the generation prompt then opens the
    block, rendered with `template` (and `extra`, the template's other options)."""
    enabled = enabled or reasoning.switch is None
    changed = replace(reasoning, enabled=enabled)
    try:
        opens = template is not None and generation_prompt_opens_block(
            template, reasoning.markers, **{**extra, **changed.options}
        )
    except ChatTemplateError:
        opens = False
    return replace(changed, prompt_opens_block=opens)
