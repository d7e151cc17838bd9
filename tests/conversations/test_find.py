"""Find in the conversation, the matching itself (chat.conversations.find): no Textual."""

from __future__ import annotations

from chat.conversations.find import Match, Search, count_matches, match_spans


def test_matches_ignore_case_and_keep_the_texts_offsets() -> None:
    assert match_spans("List, list, LIST", "list") == [(0, 4), (6, 10), (12, 16)]
    # "ß" stays one character: offsets after it are the text's own.
    assert match_spans("Straße Strasse STRASSE", "strasse") == [(7, 14), (15, 22)]


def test_a_query_is_literal_text_not_a_pattern_or_markup() -> None:
    text = "Rich writes [bold]x[/] and a regex writes a.*b"
    assert match_spans(text, "[bold]x[/]") == [(12, 22)]
    assert match_spans(text, "a.*b") == [(42, 46)]
    assert match_spans(text, "") == []


def test_occurrences_do_not_overlap() -> None:
    assert match_spans("aaaa", "aa") == [(0, 2), (2, 4)]


def test_counted_per_message_as_spans_finds_them() -> None:
    texts = ["a cat", "no", "cat and CAT", "aaaa"]
    assert count_matches(texts, "cat") == [1, 0, 2, 0]
    assert count_matches(texts, "aa") == [0, 0, 0, 2]
    assert count_matches(texts, "") == [0, 0, 0, 0]


def test_the_current_match_is_placed_in_its_message() -> None:
    search = Search.of(["a cat", "no", "cat and cat"], "cat")
    places = [search.step(1) for _ in range(4)]
    assert places == [Match(0, 0), Match(2, 0), Match(2, 1), Match(0, 0)]


def test_steps_wrap_at_either_end() -> None:
    search = Search.of(["cat", "cat", "cat"], "cat")
    assert search.counter() == "3 matches"
    assert search.step(-1) == Match(2, 0)  # from none, backwards: the last
    assert search.counter() == "3 of 3"
    search.step(1)
    assert search.counter() == "1 of 3"  # past the last: the first
    search.step(-1)
    assert search.counter() == "3 of 3"  # before the first: the last
    search.step(-1)
    assert search.counter() == "2 of 3"


def test_no_matches() -> None:
    search = Search.of(["cat"], "dog")
    assert search.step(1) is None
    assert search.counter() == "no matches"
    assert Search.of([], "").counter() == ""


def test_searching_again_keeps_the_current_occurrence() -> None:
    search = Search.of(["cat", "a cat"], "cat")
    search.step(-1)  # the cat of "a cat"
    search.redo(["cat", "a cat", "cat again"])  # a reply ended with one more
    assert search.current_match == Match(1, 0)
    assert search.counter() == "2 of 3"
    search.redo(["no", "a cat", "cat again"])  # another branch above it
    assert search.current_match == Match(1, 0)
    assert search.counter() == "1 of 2"
    search.redo(["no", "no", "cat again"])  # gone: the one now at its place
    assert search.counter() == "1 of 1"
    search.redo(["dog"])  # another branch, nothing found
    assert search.current_match is None
    assert search.counter() == "no matches"
