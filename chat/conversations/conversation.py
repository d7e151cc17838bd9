"""Value types for a chat: messages, reply statistics, a tool turn's steps
and conversations.

No I/O here: the store persists these, the engine reads them, the UI shows them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from chat.conversations.attachments import Attachment, prompt_text
from chat.conversations.tool_switches import ToolSwitches
from chat.conversations.tree import MessageTree
from chat.settings.schema import SERVER_KINDS

Role = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")

# Why a reply ended. "done": the model said it was finished (end-of-turn token
# or a stop sequence); "stopped": the user pressed Escape; "max_tokens": the
# reply reached the max-tokens setting; "context_full": the window is full;
# "error": generation failed part-way.
FinishReason = Literal["done", "stopped", "max_tokens", "context_full", "error"]
FINISH_REASONS: tuple[FinishReason, ...] = (
    "done",
    "stopped",
    "max_tokens",
    "context_full",
    "error",
)
FINISH_WORDS: dict[FinishReason, str] = {
    "done": "done",
    "stopped": "stopped",
    "max_tokens": "max tokens reached",
    "context_full": "context full",
    "error": "cut off",
}
"""How a reply ended, as the app and the exports say it ("error": a model
server's stream broke after some text, which is kept; Ctrl+L may go on)."""

# What a conversation was made with: "local", a GGUF file loaded in process
# (`Conversation.model_path`), or the kind of model server it talked to
# (`Conversation.server_url`; "auto" when the kind was not known).
LOCAL_BACKEND = "local"
BACKENDS: tuple[str, ...] = (LOCAL_BACKEND, *SERVER_KINDS)

# Whether a reply's text is all there: see `Message.state`.
ReplyState = Literal["complete", "writing", "interrupted"]
# How the chat screen and transcripts say so, for the two that are not complete.
STATE_NOTES: dict[ReplyState, str] = {
    "complete": "",
    "writing": "still being written in another kvchat window",
    "interrupted": "cut short: kvchat ended before this reply was saved whole",
}


@dataclass
class ReplyStats:
    """What the engine measured while generating one reply."""

    prompt_tokens: int
    """Tokens sent: system prompt, the whole earlier conversation, the new message."""
    prompt_evaluated: int
    """Of those, how many llama.cpp actually had to evaluate."""
    generated_tokens: int
    ttft_s: float
    """Time to first token: from the request to the first sampled token."""
    decode_tps: float
    """Generated tokens per second after the first one."""
    finish_reason: FinishReason
    seed: int | None = None
    total_s: float = 0.0
    thinking_tokens: int = 0
    """Of `generated_tokens`, those of the thinking (a reasoning model's),
    markers included."""
    first_answer_s: float | None = None
    """From the request to the answer's first token, when the reply thought
    first (`ttft_s` is then the thinking's first token); None otherwise."""

    @property
    def prompt_reused(self) -> int:
        """Prompt tokens that the KV cache already held from the previous turn."""
        return self.prompt_tokens - self.prompt_evaluated

    @property
    def has_decode_rate(self) -> bool:
        """The rate counts the tokens after the first (the first waits for
        the prompt): a reply of one token (stopped at once) has none."""
        return self.generated_tokens > 1


@dataclass(frozen=True)
class TokenChoice:
    """One step of a reply: the token chosen and what else was likely."""

    token_id: int
    text: str
    prob: float
    """Probability of the chosen token after the sampling settings."""
    raw_prob: float
    """Probability of the chosen token in the model's own distribution."""
    top: list[tuple[str, float]]
    """The most likely tokens after the sampling settings."""
    raw_top: list[tuple[str, float]]
    greedy: bool
    """Whether the chosen token was the model's most likely one."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenChoice:
        return cls(
            token_id=int(data["token_id"]),
            text=str(data["text"]),
            prob=float(data["prob"]),
            raw_prob=float(data["raw_prob"]),
            top=[(str(t), float(p)) for t, p in data["top"]],
            raw_top=[(str(t), float(p)) for t, p in data["raw_top"]],
            greedy=bool(data["greedy"]),
        )


# A tool turn's steps, kept with its reply (`Message.tool_steps`): their
# stored form is chat.conversations.tool_steps', and chat.session.tool_history
# sends them again as the model saw them.
CallOutcome = Literal["ran", "refused", "failed", "cancelled"]
CALL_OUTCOMES: tuple[CallOutcome, ...] = ("ran", "refused", "failed", "cancelled")
"""What came of a call: it ran (its result may still be an error the tool
reported), the user refused it, it failed (the server died, timed out,
refused it; no such tool), or the user cancelled it."""


@dataclass(frozen=True)
class ToolCallRecord:
    """One call a step made, and what came of it."""

    id: str
    """The call's id, as the reply's `tool_calls` and the result's `tool_call_id` carry it."""
    name: str
    """The tool's name as the model wrote it (the name it was offered:
    `SERVER_TOOL` when two servers have a tool of that name)."""
    arguments: Mapping[str, Any]
    """The call's arguments (a JSON object)."""
    server: str
    """The tool server it ran on ("" when there was no such tool)."""
    tool: str
    """The tool's name on its server."""
    outcome: CallOutcome
    result: str
    """The text the model read: the tool's result (cut, with kvchat's note,
    when it was too long), or the sentence saying it was refused, failed or
    was cancelled."""
    is_error: bool = False
    """The tool reported an error, or the call failed."""
    cut: bool = False
    """The result was cut to the token limit before the model read it."""
    result_tokens: int = 0
    """The result's tokens, as the model's tokenizer counted them (0: not counted)."""
    duration_s: float = 0.0
    """The call's own time, from the request to its result."""

    def for_template(self) -> dict[str, Any]:
        """OpenAI's shape of an assistant message's `tool_calls` entry, with
        the arguments as an object (chat templates write them with `tojson`)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": dict(self.arguments)},
        }

    def result_message(self) -> dict[str, Any]:
        """The `tool` message the model read the result in."""
        return {
            "role": "tool",
            "content": self.result,
            "tool_call_id": self.id,
            "name": self.name,
        }


@dataclass(frozen=True)
class ToolStep:
    """One intermediate reply of a tool turn and the calls it made."""

    content: str
    """What the reply said before its call (often ""), its thinking apart."""
    calls: tuple[ToolCallRecord, ...] = ()
    thinking: str = ""
    """A reasoning model's thinking in this reply, apart from `content`."""
    token_ids: tuple[int, ...] | None = None
    """The tokens the reply was sampled as, when they spell the text sent
    (`sent`, else `content`) exactly (sent again so, the KV cache then still
    holds them); None otherwise."""
    stats: ReplyStats | None = None
    """How this step's reply was generated (its prompt, reused and evaluated
    tokens, first-token time)."""
    sent: str | None = None
    """The reply's text as the tool loop sent it to the model in the turn's
    next step, when the reply thought: a local model's whole text, markers
    and thinking included (a model server's answer alone), sent again as it
    is so that the prompt stays the one the model saw. None: the model was
    sent `content`, with `thinking` as `reasoning_content`."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The reply's calls in OpenAI's shape (`ToolCallRecord.for_template`)."""
        return [call.for_template() for call in self.calls]

    def reply_message(self) -> dict[str, Any]:
        """The assistant message the model wrote: its text and its calls, its
        thinking as `reasoning_content`, its sampled tokens as `token_ids`."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content if self.sent is None else self.sent,
            "tool_calls": self.tool_calls,
        }
        if self.thinking and self.sent is None:
            message["reasoning_content"] = self.thinking
        if self.token_ids:
            message["token_ids"] = list(self.token_ids)
        return message


@dataclass
class Message:
    role: Role
    content: str
    created: float = field(default_factory=time.time)
    token_count: int | None = None
    """Tokens of this message in the chat template, once counted."""
    stats: ReplyStats | None = None
    """For assistant replies: how the reply was generated."""
    id: int | None = None
    """Row id once stored."""
    token_probs: Sequence[TokenChoice] | None = None
    """For replies generated with probability recording: one entry per token
    (a list, or a `StoredTokenChoices` decoded on first read when loaded)."""
    state: ReplyState = "complete"
    """For replies: "writing" while the model still writes it (a saved row says
    so until its final write: read back, another kvchat window is writing it
    now); "interrupted" when kvchat stopped before the end (killed, crashed,
    quit mid-reply): the text is what was saved by then, without stats."""
    parent: Message | None = field(default=None, compare=False, repr=False)
    """The message this one follows (None: a first message). Editing or
    regenerating adds a message beside another one: the same parent."""
    token_ids: list[int] | None = None
    """For replies: the token ids the model sampled, end-of-turn token excluded,
    so that the reply is sent again exactly as it was sampled."""
    attachments: Sequence[Attachment] = ()
    """For the user's messages: text files attached (chat.conversations.attachments),
    sent after `content`; `content` is what the user typed."""
    thinking: str = ""
    """For replies of a reasoning model: its thinking, without the markers;
    `content` is then the answer alone."""
    thought_open: bool = False
    """For replies of a reasoning model: it ended inside its thinking (cut
    short there). Not the same as an empty answer: a thought may close on a
    reply's last tokens, and going on then starts the answer."""
    tool_steps: tuple[ToolStep, ...] = ()
    """For a reply that called tools: its steps before the answer, in order,
    each an intermediate reply and its calls with their results
    (chat.conversations.tool_steps); `content` is then the final answer."""

    @property
    def ends_in_answer(self) -> bool:
        """Whether the model wrote an answer after the reply's tool steps (a
        reply without steps always has one). A turn stopped during a call, or
        at its most steps, ends with a result: the model was sent nothing after
        it, so nothing is sent again."""
        return not self.tool_steps or bool(self.content or self.thinking or self.token_ids)

    @property
    def prompt_content(self) -> str:
        """The text the model is sent: `content`, then the attachments."""
        return prompt_text(self.content, self.attachments)

    def as_chat_dict(self, keep_thinking: bool = False) -> dict[str, Any]:
        """The OpenAI-style `{"role", "content"}` form that chat templates take,
        plus `"token_ids"` when the reply has them (the engine sends those instead
        of re-tokenizing the text), and a reply's thinking as
        `"reasoning_content"`: the model's template decides whether it is sent
        again (most drop it from earlier turns). `keep_thinking`: a reply that
        thought is sent as it was sampled, thinking included (`"sampled_whole"`:
        its token ids spell all of it, not only `content`)."""
        data: dict[str, Any] = {"role": self.role, "content": self.prompt_content}
        if self.token_ids is not None:
            data["token_ids"] = self.token_ids
        if self.thinking:
            data["reasoning_content"] = self.thinking
            if keep_thinking and self.token_ids:
                data["sampled_whole"] = True
        return data


def system_messages(system_prompt: str) -> list[dict[str, str]]:
    """The head of every prompt: the system prompt as a message, or none when blank."""
    return [{"role": "system", "content": system_prompt}] if system_prompt else []


@dataclass
class Conversation:
    """A system prompt and the messages after it: every branch in `tree`, and in
    `messages` the branch shown, oldest first (what the next prompt is made of).

    Built from a plain list of messages (`Conversation(messages=[...])`), the
    list is one branch: each message follows the one before it. Built with a
    `tree`, `messages` must be a path in it.
    """

    system_prompt: str = ""
    messages: list[Message] = field(default_factory=list)
    title: str = ""
    id: int | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    model_path: str = ""
    model_name: str = ""
    tree: MessageTree[Message] = field(default_factory=MessageTree, compare=False, repr=False)
    backend: str = LOCAL_BACKEND
    """One of BACKENDS: "local" (the model file `model_path`) or a server's kind."""
    server_url: str = ""
    """For a server: its URL, with no user name, password or query (never a key);
    "" for a local model. The store strips such parts again before saving."""
    preset: str = ""
    """The name of the preset (chat.settings.presets) the conversation was
    given, "" for none; its system prompt and sampling are what it uses."""
    tool_switches: ToolSwitches = field(default_factory=ToolSwitches)
    """The tools turned off in this conversation (the default: all on)."""

    @property
    def made_on_server(self) -> bool:
        return self.backend != LOCAL_BACKEND

    def __post_init__(self) -> None:
        if len(self.tree) == 0:
            self.link_shown()

    def link_shown(self) -> None:
        """Messages put into `messages` directly (`messages.append(...)`, a list
        assigned) join the tree, each one after the message before it in
        `messages`. The store, the saver and the exports call this first, so
        that what is shown is what they see."""
        tree = self.tree
        parent: Message | None = None
        for message in self.messages:
            if message not in tree:
                message.parent = parent
                tree.add(message)
            parent = message

    def append(self, message: Message) -> None:
        """`message` follows the last message shown (a new turn on this branch)."""
        message.parent = self.messages[-1] if self.messages else None
        self.tree.add(message)
        self.messages.append(message)

    def show(self, message: Message) -> None:
        """Show the branch through `message`, down to its newest message."""
        self.messages = self.tree.path_to(self.tree.latest_leaf(message))

    def add_sibling(self, of: Message, new: Message) -> None:
        """`new` in `of`'s place, beside it (an edited message, a regenerated
        reply); the branch shown ends at `new`. `of` and its branch are kept."""
        new.parent = of.parent
        self.tree.add(new)
        self.messages = self.tree.path_to(new)

    def remove(self, message: Message) -> None:
        """Take back a message without replies (one that failed, or did not fit).
        If it was shown, the branch shown ends at its parent."""
        self.tree.remove(message)
        for index, shown in enumerate(self.messages):
            if shown is message:
                del self.messages[index:]
                break

    def fork_at(self, message: Message) -> Conversation:
        """A new, unsaved conversation: copies of the messages from the first one
        down to `message`, one branch, with this conversation's system prompt
        and model (or server). A reply still being written elsewhere is copied as cut off."""
        copies = [
            replace(
                m,
                id=None,
                parent=None,
                state="interrupted" if m.state == "writing" else m.state,
            )
            for m in self.tree.path_to(message)
        ]
        fork = Conversation(
            system_prompt=self.system_prompt,
            messages=copies,
            model_path=self.model_path,
            model_name=self.model_name,
            backend=self.backend,
            server_url=self.server_url,
            preset=self.preset,
            tool_switches=self.tool_switches,
        )
        # A title the user chose stays; one made from a first message is made
        # from the fork's own (a fork of an edited first message asks that).
        made = {
            Conversation(messages=[first]).default_title() for first in self.tree.children(None)
        }
        own = self.title and self.title not in made
        fork.title = f"{self.title if own else fork.default_title()} (fork)"
        return fork

    def chat_messages(self, upto: int | None = None) -> list[dict[str, str]]:
        """System prompt plus messages[:upto], as the chat template expects them."""
        return system_messages(self.system_prompt) + [
            m.as_chat_dict() for m in self.messages[:upto]
        ]

    def default_title(self) -> str:
        """The first line of the first user message, shortened."""
        for message in self.messages:
            if message.role == "user" and message.content.strip():
                line = message.content.strip().splitlines()[0]
                return line if len(line) <= 60 else line[:59] + "…"
        return "New conversation"


@dataclass(frozen=True)
class ReplyProbSummary:
    mean_prob: float
    least_likely: TokenChoice | None
    not_greedy: int
    """Tokens sampled from outside the greedy (most likely) choice."""
    tokens: int


def summarize(choices: Sequence[TokenChoice]) -> ReplyProbSummary:
    if not choices:
        return ReplyProbSummary(0.0, None, 0, 0)
    return ReplyProbSummary(
        mean_prob=sum(c.prob for c in choices) / len(choices),
        least_likely=min(choices, key=lambda c: c.prob),
        not_greedy=sum(1 for c in choices if not c.greedy),
        tokens=len(choices),
    )
