"""The context window budget: what each part of the prompt costs, and what to
leave out when it does not fit.

Every turn the whole conversation is sent again: system prompt, earlier
messages, the new message, and then the reply's tokens go into the same
window. Counts here come from the model's own chat template and tokenizer (the
same token ids the engine sends), never from estimates.

Counting is incremental: each message's tokens are counted once (rendered
after the system prompt, or after the first message when there is none, so
that templates which inject a default system prompt count it once), and cached
by content. Typing in the prompt box then costs one small tokenization, not a
pass over the whole history.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from chat.conversations.attachments import Attachment, attachment_block
from chat.conversations.conversation import Conversation, Message, system_messages
from chat.conversations.tool_steps import steps_json
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import ChatTemplateError
from chat.session.tool_history import chat_messages_of

TokenizeChat = Callable[..., list[int]]
"""`Engine.tokenize_chat`: chat messages, whether to open the reply, and
(`tools=`) the tool definitions offered."""

# Room kept free for the reply: max tokens, but never more than this share of
# the window, so that a small window still leaves room for the conversation.
MAX_RESERVE_SHARE = 0.25
# Counts kept before the cache starts over (more when one conversation needs more).
CACHE_SIZE = 20_000


_CountKey = tuple[str, str, str, str, tuple[int, ...], str, str]
"""What a count depends on: system prompt, first message, role, text, sampled
tokens, thinking, tool steps (as stored)."""


@dataclass(frozen=True)
class WindowPlan:
    """How one turn fills the window."""

    n_ctx: int
    system: int
    history: int
    """Earlier messages that are sent again this turn."""
    new: int
    """The new message, plus the template's opening of the reply."""
    reserve: int
    """Kept free for the reply."""
    included: tuple[int, ...]
    """Indices of earlier messages that are sent."""
    left_out: tuple[int, ...] = ()
    """Indices of earlier messages outside the window this turn."""
    problem: str | None = None
    """Why this turn cannot be sent (it does not fit), in words; None when it fits."""
    continued: int = 0
    """Of `new`, when a reply is continued: the reply so far, as it is sent
    (`new` is then the user's message before it, the template's opening of
    the reply, and this)."""
    thinking: int = 0
    """Of `continued`: the thinking so far of a reply that thought (the
    meter's thinking segment starts from it)."""
    tools: int = 0
    """Of `system`: the tool definitions offered, as the template renders them."""
    tool_steps: int = 0
    """Of `history`: the steps of earlier tool turns (each intermediate reply,
    its calls and their results, as chat.session.tool_history sends them)."""

    @property
    def used(self) -> int:
        return self.system + self.history + self.new

    @property
    def free(self) -> int:
        return max(0, self.n_ctx - self.used - self.reserve)

    @property
    def overflow(self) -> int:
        """Tokens over the window (0 when it fits)."""
        return max(0, self.used + self.reserve - self.n_ctx)


@dataclass
class ContextBudget:
    """Token counts for one model's template and window."""

    tokenize: TokenizeChat
    n_ctx: int
    keep_thinking: bool = False
    """Replies that thought are sent with their thinking, as sampled
    (`Message.as_chat_dict`): counted so."""
    _cache: dict[_CountKey, int] = field(default_factory=dict)

    def reserve_for(self, max_tokens: int) -> int:
        return min(max_tokens, int(self.n_ctx * MAX_RESERVE_SHARE))

    def _count(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> int:
        return len(self.tokenize(messages, add_generation_prompt)) if messages else 0

    def system_tokens(self, system_prompt: str) -> int:
        return self._head_tokens(system_messages(system_prompt))

    def tools_tokens(self, system_prompt: str, tools: Sequence[ToolDefinition]) -> int:
        """What offering `tools` adds to the prompt, as the template renders
        them (counted once per system prompt and set of tools)."""
        if not tools:
            return 0
        head = system_messages(system_prompt) or [{"role": "user", "content": ""}]
        shown = json.dumps([tool.for_template() for tool in tools], sort_keys=True)
        key = ("\0tools", system_prompt, shown, "", (), "", "")
        return self._cached(
            key, lambda: len(self.tokenize(head, False, tools=tools)) - self._count(head, False)
        )

    def message_tokens(self, system_prompt: str, message: Message, anchor: Message | None) -> int:
        """Tokens `message` adds after the system prompt (or after `anchor`,
        the conversation's first message, when there is no system prompt)."""
        head = _head(system_prompt, None if anchor is message else anchor)
        return self._message_tokens(system_prompt, head, message)

    def _message_tokens(
        self, system_prompt: str, head: list[dict[str, str]], message: Message
    ) -> int:
        key = (
            system_prompt,
            head[0]["content"] if head and not system_prompt else "",
            message.role,
            message.prompt_content,  # with its attachments
            # A reply is sent as its sampled tokens, which may count differently.
            tuple(message.token_ids or ()),
            message.thinking,
            # A tool turn is sent as its steps and its answer.
            steps_json(message.tool_steps) or "",
        )
        count = self._cache.get(key)
        if count is None:
            if message.thinking or any(step.thinking for step in message.tool_steps):
                # Reasoning templates keep a reply's thinking only while no
                # question follows it (Qwen3's), and one always follows in the
                # prompts it is sent in: counted as rendered before one.
                after = [{"role": "user", "content": ""}]
                sent = chat_messages_of(message, self.keep_thinking)
                count = self._count([*head, *sent, *after], False)
                count -= self._count([*head, *after], False)
            else:
                count = self._count([*head, *chat_messages_of(message)], False)
                count -= self._head_tokens(head)
            self._cache[key] = count
        return count

    def tool_steps_tokens(
        self, system_prompt: str, message: Message, anchor: Message | None
    ) -> int:
        """Of `message_tokens`, what a tool turn's steps take: all of it but
        its answer (counted as the same reply without steps), so that the
        two parts add up to what is sent."""
        if not message.tool_steps:
            return 0
        head = _head(system_prompt, None if anchor is message else anchor)
        whole = self._message_tokens(system_prompt, head, message)
        if not message.ends_in_answer:
            return whole
        answer = replace(message, tool_steps=())
        return whole - self._message_tokens(system_prompt, head, answer)

    def _head_tokens(self, head: list[dict[str, str]]) -> int:
        """The same for every message after it: counted once, not once per message
        (a reopened conversation of thousands of messages is counted twice as fast)
        nor once per keystroke."""
        if not head:
            return 0
        key = ("\0head", head[0]["role"], head[0]["content"], "", (), "", "")
        return self._cached(key, lambda: self._count(head, False))

    def new_message_tokens(self, system_prompt: str, text: str, anchor: Message | None) -> int:
        """The message being typed, plus the template's opening of the reply."""
        head = _head(system_prompt, anchor)
        typed = {"role": "user", "content": text}
        return self._count([*head, typed], True) - self._head_tokens(head)

    def attachment_tokens(self, attachment: Attachment) -> int:
        """About what `attachment` adds to a message (its block counted in a
        message of its own: the meter's plan counts the message exactly)."""
        return self.text_tokens(attachment_block(attachment))

    def text_tokens(self, text: str) -> int:
        """About what `text` adds to a message (an attachment's block, a
        reply's thinking whose tokens were not recorded)."""
        key = ("\0text", "", "", text, (), "", "")
        return self._cached(
            key,
            lambda: (
                self._count([{"role": "user", "content": text}], False)
                - self._count([{"role": "user", "content": ""}], False)
            ),
        )

    def generation_prompt_tokens(self, system_prompt: str, anchor: Message | None) -> int:
        head = _head(system_prompt, anchor)
        if not head:
            return 0
        key = ("\0opening", head[0]["role"], head[0]["content"], "", (), "", "")
        return self._cached(key, lambda: self._count(head, True) - self._head_tokens(head))

    def _cached(self, key: _CountKey, compute: Callable[[], int]) -> int:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def count_messages(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        cancel: threading.Event | None = None,
    ) -> list[int]:
        """Each message's tokens (see `message_tokens`). With a real tokenizer a
        message not counted before takes about a millisecond (the chat template
        is rendered for it), so a long conversation is counted in a thread, which
        `cancel` stops between two messages (the list is then cut short)."""
        if len(self._cache) > max(CACHE_SIZE, 2 * len(messages)):
            # A long session: start over rather than grow forever. Only here,
            # never halfway through a count: a conversation larger than the
            # cache would be counted again at every keystroke.
            self._cache.clear()
        if not messages:
            return []
        anchor = messages[0]
        head = _head(system_prompt, anchor)
        counts = [self._message_tokens(system_prompt, _head(system_prompt, None), anchor)]
        for message in messages[1:]:
            if cancel is not None and cancel.is_set():
                break
            counts.append(self._message_tokens(system_prompt, head, message))
        return counts

    def plan(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        new_text: str | None,
        max_tokens: int,
        policy: str,
        tools: Sequence[ToolDefinition] = (),
    ) -> WindowPlan:
        """Which earlier messages to send with `new_text` (None: regenerate the
        reply to the last message), `tools` offered. When the turn cannot fit,
        `problem` says why, and the caller refuses to send it (a chat template
        that fails on this conversation is such a problem: the text stays, the
        app goes on)."""
        try:
            return self._plan(system_prompt, messages, new_text, max_tokens, policy, tools)
        except ChatTemplateError as error:
            return WindowPlan(self.n_ctx, 0, 0, 0, 0, (), (), str(error))

    def _plan(
        self,
        system_prompt: str,
        messages: Sequence[Message],
        new_text: str | None,
        max_tokens: int,
        policy: str,
        tools: Sequence[ToolDefinition] = (),
    ) -> WindowPlan:
        counts = self.count_messages(system_prompt, messages)
        anchor = messages[0] if messages else None
        tools_tokens = self.tools_tokens(system_prompt, tools)
        system = self.system_tokens(system_prompt) + tools_tokens
        if new_text is not None:
            new = self.new_message_tokens(system_prompt, new_text, anchor)
            earlier = list(range(len(messages)))
        else:
            # Regenerating: the last user message is the "new" one.
            new = counts[-1] + self.generation_prompt_tokens(system_prompt, anchor) if counts else 0
            earlier = list(range(len(messages) - 1))
        reserve = self.reserve_for(max_tokens)
        room = self.n_ctx - system - new - reserve
        problem = None
        if room < 0:
            included: list[int] = []
            problem = (
                f"The message needs {system + new + reserve:,} tokens with the system prompt and "
                f"{reserve:,} kept free for the reply, but the window holds {self.n_ctx:,} "
                f"({-room:,} too many). Shorten it, or lower max tokens in the settings (F2)."
            )
        else:
            included = _choose(earlier, counts, room, policy, messages)
        history = sum(counts[i] for i in included)
        tool_steps = sum(
            self.tool_steps_tokens(system_prompt, messages[i], anchor) for i in included
        )
        if problem is None and history > room:  # only with policy "stop"
            problem = (
                f"The conversation does not fit in the window: {history - room:,} tokens too many "
                f"(window {self.n_ctx:,}, reply reserve {reserve:,}). Start a new conversation "
                "(Ctrl+N), shorten the message, or set the overflow policy to drop-oldest "
                "in the settings (F2)."
            )
        sent = set(included)
        left_out = tuple(i for i in earlier if i not in sent)
        return WindowPlan(
            self.n_ctx,
            system,
            history,
            new,
            reserve,
            tuple(included),
            left_out,
            problem,
            tools=tools_tokens,
            tool_steps=tool_steps,
        )


def _head(system_prompt: str, anchor: Message | None) -> list[dict[str, str]]:
    """What a message is counted after: the system prompt, or else the
    conversation's first message (templates may add a default system prompt
    for the first message, which must be counted once)."""
    return system_messages(system_prompt) or ([anchor.as_chat_dict()] if anchor else [])


def _turns(indices: list[int], messages: Sequence[Message]) -> list[list[int]]:
    """Group message indices into turns: a user message and the replies after it.
    Leaving out whole turns keeps user/assistant alternation, which some
    templates require."""
    turns: list[list[int]] = []
    for i in indices:
        if messages[i].role == "user" or not turns:
            turns.append([i])
        else:
            turns[-1].append(i)
    return turns


def _choose(
    earlier: list[int], counts: list[int], room: int, policy: str, messages: Sequence[Message]
) -> list[int]:
    if policy == "stop" or sum(counts[i] for i in earlier) <= room:
        return earlier
    turns = _turns(earlier, messages)
    cost = [sum(counts[i] for i in turn) for turn in turns]
    keep_first = policy == "truncate-middle" and len(turns) > 1 and cost[0] <= room
    budget = room - (cost[0] if keep_first else 0)
    kept: list[list[int]] = []
    # Newest turns first, until the next one would not fit.
    start = 1 if keep_first else 0
    for turn, turn_cost in zip(reversed(turns[start:]), reversed(cost[start:]), strict=True):
        if turn_cost > budget:
            break
        kept.insert(0, turn)
        budget -= turn_cost
    if keep_first:
        kept.insert(0, turns[0])
    return [i for turn in kept for i in turn]


def prompt_messages(
    conversation: Conversation,
    plan: WindowPlan,
    newest: Message | None = None,
    keep_thinking: bool = False,
) -> list[dict[str, str]]:
    """What a turn sends: the system prompt, the earlier messages that fit
    (`plan.included`), and the newest message (by default the conversation's
    last). `keep_thinking`: see `Message.as_chat_dict`. A reply with tool
    steps is sent as the model saw it: its calls and their results, then its
    answer (chat.session.tool_history)."""
    newest = newest or conversation.messages[-1]
    return [
        *history_messages(conversation, plan, keep_thinking),
        *chat_messages_of(newest, keep_thinking),
    ]


def history_messages(
    conversation: Conversation, plan: WindowPlan, keep_thinking: bool = False
) -> list[dict[str, str]]:
    """The system prompt and the earlier messages that fit the window."""
    messages = conversation.messages
    earlier = [sent for i in plan.included for sent in chat_messages_of(messages[i], keep_thinking)]
    return system_messages(conversation.system_prompt) + earlier
