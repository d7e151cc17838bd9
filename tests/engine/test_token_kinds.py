"""Which tokens of a saved reply were its thinking (chat.engine.reasoning.
token_kinds), read from the tokens' texts as the token view gets them."""

from __future__ import annotations

from chat.engine.reasoning.token_kinds import thinking_tokens

THOUGHT = ["<", "think", ">", "\n", "Plan", " this", "\n", "</", "think", ">", "\n\n"]


def test_the_thought_and_its_markers_are_thinking_the_answer_is_not() -> None:
    kinds = thinking_tokens([*THOUGHT, "Sure", "."], thought=True)
    # The blank line after the closing marker is the answer's (where it starts).
    assert kinds == [True] * 10 + [False] * 3


def test_a_block_the_prompt_opened_starts_the_reply_as_thinking() -> None:
    assert thinking_tokens(["Plan", "\n", "</think>", "\n\n", "Ok"], thought=True) == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_cut_inside_an_opened_block_all_of_it_is_thinking() -> None:
    assert thinking_tokens(["Plan", " more"], thought=True) == [True, True]


def test_a_reply_without_thinking_has_none_even_if_it_quotes_a_marker() -> None:
    assert thinking_tokens(["Use", " </think>", " here"], thought=False) == [False] * 3
