"""The conversation tree: every branch kept, one shown; editing, regenerating,
moving between branches and forking, as values (no store, no UI)."""

from __future__ import annotations

import time

import pytest

from chat.conversations.conversation import Conversation, Message
from chat.conversations.tree import MessageTree


def texts(messages: object) -> list[str]:
    return [m.content for m in messages]  # type: ignore[attr-defined]


def chat_of(*contents: str) -> Conversation:
    return Conversation(
        messages=[Message("user" if i % 2 == 0 else "assistant", c) for i, c in enumerate(contents)]
    )


def test_a_list_of_messages_is_one_branch() -> None:
    conv = chat_of("q1", "a1", "q2")
    assert [m.parent for m in conv.messages] == [None, *conv.messages[:-1]]
    assert texts(conv.tree) == ["q1", "a1", "q2"] and len(conv.tree) == 3
    assert conv.tree.path_to(conv.messages[-1]) == conv.messages
    assert texts(conv.tree.children(None)) == ["q1"]
    assert conv.tree.latest_leaf(conv.messages[0]) is conv.messages[-1]
    assert conv.tree.leaves() == [conv.messages[-1]]


def test_append_follows_the_last_message_shown() -> None:
    conv = Conversation()
    question = Message("user", "q")
    conv.append(question)
    reply = Message("assistant", "a")
    conv.append(reply)
    assert question.parent is None and reply.parent is question
    assert conv.messages == [question, reply] and list(conv.tree) == [question, reply]


def test_regenerate_and_edit_add_siblings_and_keep_every_branch() -> None:
    conv = chat_of("q", "a1", "q2", "a2")
    question, first, follow_up, _ = conv.messages
    # Regenerate: a reply beside the first one; the view ends there.
    second = Message("assistant", "a1, again")
    conv.add_sibling(first, second)
    assert texts(conv.messages) == ["q", "a1, again"]
    assert conv.tree.siblings(first) == [first, second] == conv.tree.siblings(second)
    # Edit the first question: a new first message.
    edited = Message("user", "q, edited")
    conv.add_sibling(question, edited)
    assert texts(conv.messages) == ["q, edited"] and edited.parent is None
    assert texts(conv.tree.children(None)) == ["q", "q, edited"]
    assert len(conv.tree) == 6
    # Moving back to the first question shows its newest branch (a1, again)...
    conv.show(question)
    assert texts(conv.messages) == ["q", "a1, again"]
    # ... and moving to the first reply shows the branch below it, down to its end.
    conv.show(first)
    assert texts(conv.messages) == ["q", "a1", "q2", "a2"]
    assert conv.tree.children(follow_up)[0].parent is follow_up


def test_latest_leaf_is_where_the_branch_was_last_continued() -> None:
    conv = chat_of("q", "a1")
    question, first = conv.messages
    second = Message("assistant", "a2")
    conv.add_sibling(first, second)
    conv.show(first)
    conv.append(Message("user", "more on a1"))  # the branch of a1 is the newest now
    assert texts(conv.tree.path_to(conv.tree.latest_leaf(question))) == ["q", "a1", "more on a1"]
    assert conv.tree.latest_leaf(second) is second
    assert conv.tree.newest_leaf() is conv.messages[-1]


def test_equal_messages_are_different_messages() -> None:
    conv = chat_of("q", "ok")
    twin = Message("assistant", "ok", created=conv.messages[1].created)
    assert twin == conv.messages[1]  # the same fields...
    conv.add_sibling(conv.messages[1], twin)
    assert len(conv.tree.siblings(twin)) == 2  # ... yet two messages
    assert twin in conv.tree and Message("assistant", "ok") not in conv.tree
    conv.remove(twin)  # the one taken back, not its equal
    assert texts(conv.messages) == ["q"]
    assert conv.tree.leaves() == [conv.tree.children(conv.messages[0])[0]]
    assert conv.tree.leaves()[0] is not twin


def test_remove_takes_back_a_leaf_only() -> None:
    conv = chat_of("q", "a")
    question, reply = conv.messages
    with pytest.raises(ValueError, match="without replies"):
        conv.remove(question)
    conv.remove(reply)
    assert conv.messages == [question] and list(conv.tree) == [question]
    assert conv.tree.children(question) == []
    with pytest.raises(ValueError, match="not in the tree"):
        conv.tree.remove(reply)
    conv.remove(question)
    assert conv.messages == [] and len(conv.tree) == 0 and conv.tree.newest_leaf() is None


def test_add_refuses_a_message_twice_or_without_its_parent() -> None:
    tree: MessageTree[Message] = MessageTree()
    orphan = Message("assistant", "a", parent=Message("user", "not in the tree"))
    with pytest.raises(ValueError, match="parent is not in the tree"):
        tree.add(orphan)
    first = Message("user", "q")
    tree.add(first)
    with pytest.raises(ValueError, match="already"):
        tree.add(first)


def test_fork_at_copies_the_path_as_a_new_conversation() -> None:
    conv = chat_of("q", "a1", "q2", "a2")
    conv.system_prompt, conv.title, conv.id, conv.model_name = "Sys", "Chat", 4, "demo"
    for number, message in enumerate(conv.tree, start=1):
        message.id = number
    conv.messages[1].token_ids = [1, 2]
    conv.messages[1].state = "writing"
    forked = conv.fork_at(conv.messages[1])
    assert texts(forked.messages) == ["q", "a1"] and len(forked.tree) == 2
    assert forked.id is None and all(m.id is None for m in forked.messages)
    assert (forked.system_prompt, forked.title, forked.model_name) == ("Sys", "Chat (fork)", "demo")
    assert forked.messages[1].parent is forked.messages[0]
    assert forked.messages[1].token_ids == [1, 2]
    assert forked.messages[1].state == "interrupted"  # its writer goes on elsewhere
    assert all(m is not o for m, o in zip(forked.messages, conv.messages, strict=False))
    assert texts(conv.messages) == ["q", "a1", "q2", "a2"]  # the original is untouched
    assert conv.messages[1].id == 2


def test_a_fork_of_an_edited_first_message_is_titled_from_it() -> None:
    # The title made from the first branch's question named a fork that
    # holds only the second's ("Forked: Name a fruit. (fork)").
    conv = chat_of("Name a fruit.", "Apple.")
    conv.title = conv.default_title()  # as the first save sets it
    edited = Message("user", "Name a vegetable.")
    conv.add_sibling(conv.messages[0], edited)  # the edit's branch
    assert conv.fork_at(edited).title == "Name a vegetable. (fork)"
    assert conv.fork_at(conv.tree.children(None)[0]).title == "Name a fruit. (fork)"
    conv.title = "Food"  # a title the user chose stays
    assert conv.fork_at(edited).title == "Food (fork)"


def test_as_chat_dict_carries_the_sampled_tokens() -> None:
    assert Message("user", "hi").as_chat_dict() == {"role": "user", "content": "hi"}
    reply = Message("assistant", "Hello", token_ids=[9, 8])
    assert reply.as_chat_dict() == {"role": "assistant", "content": "Hello", "token_ids": [9, 8]}


def test_the_tree_is_fast_for_100000_messages() -> None:
    start = time.perf_counter()
    conv = Conversation()
    for i in range(50_000):
        conv.append(Message("user" if i % 2 == 0 else "assistant", f"m{i}"))
    # A second branch from the middle, 50,000 more.
    conv.show(conv.messages[24_999])
    conv.messages = conv.messages[:25_000]
    for i in range(50_000):
        conv.append(Message("user", f"b{i}"))
    built = time.perf_counter() - start
    middle = conv.messages[24_999]
    start = time.perf_counter()
    for _ in range(100):
        assert len(conv.tree.children(middle)) == 2
        assert len(conv.tree.siblings(conv.messages[25_000])) == 2
    lookups = time.perf_counter() - start
    start = time.perf_counter()
    conv.show(conv.tree.children(middle)[0])
    switched = time.perf_counter() - start
    assert len(conv.messages) == 50_000 and len(conv.tree) == 100_000
    # Limits for a regression, far above what a busy 2-CPU machine takes (about
    # 1.5 s, 1 ms and 0.1 s): a scan of the tree per lookup would take 100 times longer.
    assert built < 10.0 and lookups < 0.05 and switched < 2.0, (built, lookups, switched)
