"""Every message of a conversation, every branch: a tree by `Message.parent`.

Editing a message or regenerating a reply adds a sibling beside it (the same
parent); the old one stays. The conversation shows one branch, a path from a
first message down to a leaf. No I/O here.

Messages are told apart by identity, never by value: two messages with the
same fields (two "ok" replies) are different messages. An index of children
per parent keeps every operation independent of the tree's size, except the
walks that are as long as what they return (`path_to`) or visit (`latest_leaf`:
the branch below a message).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar, cast


class Node(Protocol):
    """What the tree needs of a message (`chat.conversations.conversation.Message`,
    not imported: that module builds on this one)."""

    @property
    def parent(self) -> Node | None: ...


Message = TypeVar("Message", bound=Node)


class MessageTree(Generic[Message]):
    """The messages of one conversation, in creation order, with each one's children."""

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        """`messages`: in creation order, each one's `parent` among the ones before it."""
        # id(message) -> (creation number, message): the order messages were added
        # (dicts keep insertion order) and a reference that keeps each id valid.
        self._order: dict[int, tuple[int, Message]] = {}
        # id(parent) (None: the first messages) -> children, oldest first.
        self._children: dict[int | None, list[Message]] = {}
        self._next = 0
        for message in messages:
            self.add(message)

    def add(self, message: Message) -> None:
        """Add `message`, newest of all; its `parent` (None: a first message) must be here."""
        key, order = id(message), self._order
        if key in order:
            raise ValueError("this message is already in the tree")
        parent = message.parent
        parent_key = None if parent is None else id(parent)
        if parent_key is not None and parent_key not in order:
            raise ValueError("the message's parent is not in the tree")
        order[key] = (self._next, message)
        self._next += 1
        siblings = self._children.get(parent_key)
        if siblings is None:
            self._children[parent_key] = [message]
        else:
            siblings.append(message)

    def remove(self, message: Message) -> None:
        """Take back a leaf (a message without replies, e.g. one that failed)."""
        key = id(message)
        if key not in self._order:
            raise ValueError("this message is not in the tree")
        if self._children.get(key):
            raise ValueError("only a message without replies can be removed")
        del self._order[key]
        self._children.pop(key, None)
        parent_key = None if message.parent is None else id(message.parent)
        siblings = self._children[parent_key]
        del siblings[index_of(siblings, message)]
        if not siblings:
            del self._children[parent_key]

    def __contains__(self, message: object) -> bool:
        return id(message) in self._order

    def __iter__(self) -> Iterator[Message]:
        """Every message, oldest first: a parent always before its children."""
        return (message for _, message in self._order.values())

    def __len__(self) -> int:
        return len(self._order)

    def children(self, parent: Message | None) -> list[Message]:
        """The messages that follow `parent` (None: the first messages), oldest first."""
        return list(self._children.get(None if parent is None else id(parent), ()))

    def siblings(self, message: Message) -> list[Message]:
        """The messages in `message`'s place, itself included, oldest first."""
        return self.children(cast("Message | None", message.parent))

    def path_to(self, message: Message) -> list[Message]:
        """The branch from the first message down to `message`, both included."""
        path: list[Message] = []
        node: Message | None = message
        while node is not None:
            path.append(node)
            node = cast("Message | None", node.parent)
        path.reverse()
        return path

    def latest_leaf(self, message: Message) -> Message:
        """The newest message below `message` (itself if none follows it).

        The newest message of a branch is always a leaf: a message's replies are
        created after it. So this is where the branch through `message` was last
        continued, the message to show when the user moves to `message`.
        """
        newest, newest_number = message, self._order[id(message)][0]
        stack = [message]
        while stack:
            node = stack.pop()
            children = self._children.get(id(node))
            if not children:
                continue
            # Siblings are in creation order: the last one is the newest of them.
            number = self._order[id(children[-1])][0]
            if number > newest_number:
                newest, newest_number = children[-1], number
            stack.extend(children)
        return newest

    def newest_leaf(self) -> Message | None:
        """The newest message of all (a leaf), or None when there is none."""
        if not self._order:
            return None
        _, message = next(reversed(self._order.values()))
        return message

    def leaves(self) -> list[Message]:
        """Every message without replies, oldest first: one per branch."""
        return [message for message in self if not self._children.get(id(message))]


def index_of(messages: Sequence[Message], message: Message) -> int:
    """Where `message` itself is in `messages` (messages with equal fields are
    different messages, so `list.index` will not do)."""
    return next(i for i, other in enumerate(messages) if other is message)
