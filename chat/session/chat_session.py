"""One conversation being held: its messages and settings, how each turn
fills the context window, and its saving. The chat screen shows it and feeds
it the user's actions; no Textual here.

`settings` are the conversation's own: a reopened conversation gets a copy
with its saved sampling settings, and `defaults` (what new conversations
start from, changed by the settings pane) stay as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from chat import paths
from chat.conversations.attachments import Attachment
from chat.conversations.conversation import LOCAL_BACKEND, Conversation, FinishReason, Message
from chat.conversations.saver import ConversationSaver, ConversationSettings, restore_sampling
from chat.conversations.tool_steps import ToolStep
from chat.conversations.tool_switches import ToolSwitches
from chat.conversations.tree import index_of
from chat.engine.protocol import ChatMessages, Engine, Finished, ModelInfo
from chat.engine.reasoning.markers import Reasoning
from chat.engine.state_cache import StateCache
from chat.engine.tool_calls.calls import ToolDefinition
from chat.errors import KvchatError
from chat.models.files import same_path
from chat.runtime.model_loader import ModelLoader
from chat.session.context_window import (
    ContextBudget,
    WindowPlan,
    history_messages,
    prompt_messages,
)
from chat.session.resume import SAVE_WAIT_S, Resumer, conversation_key
from chat.settings.presets import Preset
from chat.settings.schema import Settings
from chat.settings.server import public_url

MIB = 1024 * 1024

CONTINUABLE: tuple[FinishReason, ...] = ("max_tokens", "stopped", "error")
"""Why a reply ended, when it can be continued: cut short, not finished by the
model ("error": a model server's connection dropped mid-reply; what came is
kept, and the reply goes on from there once the server answers again)."""


class ChatSession:
    def __init__(
        self,
        defaults: Settings,
        models: ModelLoader,
        report_save_problem: Callable[[str], None],
        not_saving_changed: Callable[[str | None], None] = lambda reason: None,
        changed_elsewhere: Callable[[], None] = lambda: None,
    ) -> None:
        """`models`: the loader, which owns the engine; the session reads it.
        The callables are the saver's (chat.conversations.saver)."""
        self.defaults = defaults
        self.settings = defaults
        self.conversation = Conversation(system_prompt=defaults.chat.system_prompt)
        self.saver = ConversationSaver(report_save_problem, not_saving_changed, changed_elsewhere)
        self._models = models
        self.resumer = Resumer(
            StateCache(paths.kv_states_dir(), defaults.chat.resume_cache_mb * MIB)
        )
        """Saves the KV cache of a conversation that is left, and puts it back."""
        self.resume_pending = False
        """A conversation was opened or a branch shown, and no restore was tried yet."""
        self._budget: ContextBudget | None = None
        self._budget_key: tuple[object, ...] = ()
        """What the counts of `_budget` hold for: the engine's tokenizer and how
        its model thinks (thinking off renders other prompts)."""
        self._outside_window: set[int] = set()
        """id() of the messages outside the window at the last turn."""
        self._system_tokens = 0
        self.tool_definitions: Callable[[], Sequence[ToolDefinition]] = lambda: ()
        """The tools the next reply is offered (the turn's): planned with it."""

    # The model.

    @property
    def engine(self) -> Engine | None:
        """The model replies use now (None while none is loaded or another loads)."""
        return self._models.usable_engine

    @property
    def model(self) -> ModelInfo | None:
        engine = self.engine
        return engine.info if engine is not None else None

    @property
    def budget(self) -> ContextBudget | None:
        """Token counts for the model in memory (the old one while another loads,
        so the meter still counts); None when no model is loaded."""
        engine = self._models.engine
        if engine is None:
            return None
        # Every count and every prompt is planned here first: the template
        # renders with this conversation's thinking switch from now on.
        sampling = self.settings.sampling
        engine.set_thinking(sampling.thinking)
        key = (engine.tokenize_chat, engine.info.reasoning, sampling.keep_thinking)
        if self._budget is None or self._budget_key != key:
            self._budget = ContextBudget(
                engine.tokenize_chat, engine.info.n_ctx, sampling.keep_thinking
            )
            self._budget_key = key
        return self._budget

    # Planning a turn.

    def plan(self, new_text: str | None, before: Message | None = None) -> WindowPlan | None:
        """How a turn sending `new_text` (None: regenerating the last reply, or
        continuing it) fills the window; None while no model is ready.
        `before`: a message of the conversation that `new_text` replaces (an
        edit): only the messages before it are sent with it."""
        budget = self.budget
        if budget is None:
            return None
        messages = self.conversation.messages
        if before is not None and any(message is before for message in messages):
            messages = messages[: index_of(messages, before)]
        plan = budget.plan(
            self.conversation.system_prompt,
            messages,
            new_text,
            self.settings.sampling.max_tokens,
            self.settings.chat.overflow,
            self.tool_definitions(),
        )
        if new_text is None and plan.problem is None:
            return self._continuing(budget, plan)
        return plan

    def _continuing(self, budget: ContextBudget, plan: WindowPlan) -> WindowPlan:
        """`plan` for continuing the last reply: the user's message before it
        is the new one, as when the reply was sent, and the reply goes on
        whole, a reasoning model's thinking included (`reply_prompt`),
        whatever the template drops of it. Counted as the tokens it was
        sampled as, when it has them, with its thinking so far apart. (The
        budget plans a continue as a regeneration of the reply: the reply as
        the new message, rendered whole and closed, the user's in `history`.)"""
        reply = self.last_reply()
        if reply is None:
            return plan
        messages = self.conversation.messages
        system_prompt = self.conversation.system_prompt
        rendered = budget.message_tokens(system_prompt, reply, messages[0])
        opening = plan.new - rendered  # the template's opening of a reply
        asked = len(messages) - 2
        user = (
            budget.message_tokens(system_prompt, messages[asked], messages[0])
            if asked in plan.included
            else 0
        )
        model = self.model
        thinking = 0
        if reply.thinking and model is not None and model.reasoning is not None:
            stats = reply.stats
            thinking = stats.thinking_tokens if stats else budget.text_tokens(reply.thinking)
        whole = len(reply.token_ids) if reply.token_ids else rendered + thinking
        return replace(
            plan,
            history=plan.history - user,
            new=user + opening + whole,
            thinking=min(thinking, whole),
            continued=whole,
        )

    def reply_prompt(self, plan: WindowPlan, continuing: bool = False) -> list[dict[str, Any]]:
        """What the reply to the conversation's last message is generated from;
        `continuing`: the last message is a reply to go on with. A reply that
        thought goes on from its whole text as the model wrote it (inside its
        thought when it was cut there), after the prompt it was sampled from."""
        messages = prompt_messages(self.conversation, plan, keep_thinking=self._keep_thinking)
        reply = self.conversation.messages[-1]
        engine = self.engine
        reasoning = engine.info.reasoning if engine is not None else None
        if continuing and reply.thinking and reasoning is not None:
            messages[-1] = whole_reply(reply, reasoning)
        return messages

    def prefill_prompt(
        self, text: str, before: Message | None = None
    ) -> tuple[ChatMessages, bool] | None:
        """What to evaluate ahead while the user pauses over `text`: the prompt that
        sending it would send (True: a message; `before`: the message it
        replaces, as in `plan`), or with no text the conversation so far
        (False: just opened, its first reply then evaluates little more than
        the new message). None when there is nothing to do."""
        plan = self.plan(text, before)
        if plan is None or plan.problem:
            return None
        if text.strip():
            newest = Message("user", text)
            return prompt_messages(self.conversation, plan, newest, self._keep_thinking), True
        if self.conversation.messages:
            return history_messages(self.conversation, plan, self._keep_thinking), False
        return None

    @property
    def _keep_thinking(self) -> bool:
        return self.settings.sampling.keep_thinking

    def mark_window(self, plan: WindowPlan) -> None:
        """Remember which messages are outside the window this turn (or the
        next: the meter's plan). An index past the messages (a plan made before
        a branch switch shortened them) marks nothing: the next plan is exact."""
        messages = self.conversation.messages
        self._outside_window = {id(messages[i]) for i in plan.left_out if i < len(messages)}
        self._system_tokens = plan.system

    @property
    def has_messages_outside(self) -> bool:
        return bool(self._outside_window)

    def window_states(self, shown: Sequence[Message]) -> list[bool]:
        """Set each shown message's `token_count` as of the last turn; for each,
        whether it was outside the window then."""
        assert self.budget is not None
        messages = self.conversation.messages
        anchor = messages[0] if messages else None
        in_conversation = {id(message) for message in messages}
        outside = []
        for message in shown:
            if message.role == "system":
                message.token_count = self._system_tokens
            elif id(message) in in_conversation:
                message.token_count = self.budget.message_tokens(
                    self.conversation.system_prompt, message, anchor
                )
            outside.append(id(message) in self._outside_window)
        return outside

    def fill_token_counts(self, shown: Sequence[Message]) -> list[Message]:
        """Give each message of the conversation among `shown` that has no token
        count yet (a branch just switched to) its count; returns those counted.
        Call it after planning: the counts are then cached."""
        assert self.budget is not None
        messages = self.conversation.messages
        anchor = messages[0] if messages else None
        in_conversation = {id(message) for message in messages}
        counted = []
        for message in shown:
            if message.token_count is None and id(message) in in_conversation:
                message.token_count = self.budget.message_tokens(
                    self.conversation.system_prompt, message, anchor
                )
                counted.append(message)
        return counted

    # One turn.

    def add_user_message(
        self, text: str, plan: WindowPlan, attachments: Sequence[Attachment] = ()
    ) -> Message:
        """The user's message joins the conversation and is saved at once, before
        the reply starts: a crash mid-reply never loses the question. `plan`
        was made for the text with its attachments (`prompt_text`)."""
        assert self.budget is not None
        messages = self.conversation.messages
        opening = self.budget.generation_prompt_tokens(
            self.conversation.system_prompt, messages[0] if messages else None
        )
        message = Message(
            "user", text, token_count=plan.new - opening, attachments=tuple(attachments)
        )
        self.conversation.append(message)
        self.saver.save_messages(self.conversation, self.conversation_settings())
        return message

    def begin_reply(self, plan: WindowPlan) -> Message:
        """The reply's message, empty, and its row in the database."""
        self.mark_window(plan)
        messages = self.conversation.messages
        # It follows the last message shown: beside the old reply when regenerating.
        reply = Message("assistant", "", parent=messages[-1] if messages else None)
        self.saver.start_reply(self.conversation, self.conversation_settings(), reply)
        return reply

    def end_reply(
        self,
        reply: Message,
        finished: Finished,
        thinking: str = "",
        tool_steps: tuple[ToolStep, ...] = (),
        *,
        thought_open: bool = False,
    ) -> None:
        """The reply is complete: it joins the conversation, whole, and is saved.
        `thinking`: a reasoning model's, apart from the answer (`finished.text`);
        `tool_steps`: a tool turn's steps before the answer; `thought_open`:
        it ended inside its thinking."""
        reply.content, reply.stats = finished.text, finished.stats
        reply.thinking, reply.thought_open = thinking, thought_open
        reply.tool_steps = tool_steps  # saved with it: the saver reads the reply's own
        # As the reply's thread left them: encoded to be saved (chat.session.reply_stream).
        reply.token_probs = finished.choices or None
        # Sent again as sampled: the KV cache then holds the next prompt's prefix.
        reply.token_ids = list(finished.token_ids) if finished.token_ids is not None else None
        self.conversation.append(reply)
        self.saver.finish_reply(
            finished.text,
            finished.stats,
            reply.token_ids,
            thinking=thinking,
            thought_open=thought_open,
        )

    def continuable_reply(self) -> Message | None:
        """The last reply, when it was cut short (max tokens, Esc, a dropped
        connection to a model server, or kvchat stopped while writing it) and
        can be continued."""
        reply = self.last_reply()
        if reply is None or not (reply.content or reply.thinking):
            return None
        if reply.state == "interrupted":
            return reply
        if reply.stats is not None and reply.stats.finish_reason in CONTINUABLE:
            return reply
        return None

    def begin_continue(self, reply: Message, plan: WindowPlan) -> None:
        """`reply` (the last message) is continued: its row is written as it grows."""
        self.mark_window(plan)
        self.saver.start_reply(self.conversation, self.conversation_settings(), reply)

    def end_continue(
        self,
        reply: Message,
        finished: Finished,
        thinking: str | None = None,
        thought_open: bool = False,
    ) -> None:
        """The continuation is complete: appended to `reply`, which is saved.
        Its figures add up the two parts' tokens and times; the prompt's are
        the continuation's (how much of it the KV cache held). `thinking`: the
        reply's whole thinking, when the continuation went on inside it;
        `thought_open`: it ended inside it again."""
        new = finished.stats
        old = reply.stats
        if old is not None:
            first_answer_s = old.first_answer_s
            if first_answer_s is None and new.first_answer_s is not None:
                first_answer_s = old.total_s + new.first_answer_s
            new = replace(
                new,
                generated_tokens=old.generated_tokens + new.generated_tokens,
                total_s=old.total_s + new.total_s,
                thinking_tokens=old.thinking_tokens + new.thinking_tokens,
                first_answer_s=first_answer_s,
            )
        if thinking is not None:
            reply.thinking = thinking
        old_ids, new_ids = reply.token_ids, finished.token_ids
        reply.token_ids = [*old_ids, *new_ids] if old_ids and new_ids is not None else None
        old_probs = reply.token_probs
        # One entry per token or none: probabilities of only a part would not line up.
        reply.token_probs = (
            [*old_probs, *finished.choices] if old_probs and finished.choices else None
        )
        reply.content += finished.text
        reply.stats = new
        reply.state = "complete"
        reply.thought_open = thought_open
        self.saver.finish_reply(
            reply.content,
            reply.stats,
            reply.token_ids,
            thinking=reply.thinking or None,
            thought_open=thought_open,
        )

    def end_continue_failed(self, reply: Message) -> None:
        """The continuation failed before any of it was kept: `reply` stays as
        it was (written again as it was, should progress have been saved)."""
        self.saver.finish_reply(reply.content, reply.stats, reply.token_ids)

    def drop_reply(self, reply: Message) -> None:
        """A reply that failed: gone from the database too."""
        self.saver.discard(self.conversation, reply)

    def take_back_last_message(self) -> Message | None:
        """Remove the last message (a message that did not fit), from the database too."""
        if not self.conversation.messages:
            return None
        last = self.conversation.messages[-1]
        self.conversation.remove(last)
        self.saver.discard(self.conversation, last)
        return last

    def last_reply(self) -> Message | None:
        messages = self.conversation.messages
        return messages[-1] if messages and messages[-1].role == "assistant" else None

    def last_seed(self) -> int | None:
        """The seed of the newest reply in the conversation, if there is one."""
        for message in reversed(self.conversation.messages):
            if message.role == "assistant" and message.stats and message.stats.seed is not None:
                return message.stats.seed
        return None

    # Branches: every edit and regeneration keeps what it replaces as an
    # alternative (a sibling in the conversation's tree); the view shows one branch.

    def alternatives(self, message: Message) -> list[Message]:
        """`message` and the other messages in its place (its siblings), oldest first."""
        return self.conversation.tree.siblings(message)

    def show_alternative(self, message: Message, step: int) -> Message | None:
        """Show the previous (`step` -1) or next (+1) alternative of `message`, and
        the branch below it down to its newest message. None when there is none
        that way."""
        siblings = self.alternatives(message)
        index = index_of(siblings, message) + step
        if not 0 <= index < len(siblings):
            return None
        target = siblings[index]
        self.show_branch(target)
        return target

    def show_branch(self, message: Message) -> None:
        """Show the branch through `message` (down to its newest message); the
        conversation remembers it as the one shown."""
        self.leave()  # the branch left can be switched back to at once
        self.conversation.show(message)
        self.resume_pending = True
        self._outside_window = set()
        self.saver.shown_branch_changed(self.conversation)

    def cut_before(self, message: Message) -> list[Message]:
        """Show only the messages before `message`, to send its replacement (an
        edited message, a regenerated reply) as a new branch from there. Returns
        the branch shown until now, for `restore_branch` if nothing is sent.
        The KV cache of the branch left is saved: switching back is instant."""
        self.leave()
        shown = self.conversation.messages
        self.conversation.messages = shown[: index_of(shown, message)]
        return shown

    def restore_branch(self, shown: list[Message]) -> None:
        self.conversation.messages = shown

    def edit_reply(self, reply: Message, text: str) -> Message:
        """The reply with `text` as a new alternative beside it (the original is
        kept); the conversation goes on from the edited one. Saved at once."""
        edited = Message("assistant", text)
        self.conversation.add_sibling(reply, edited)
        self._outside_window = set()
        self.saver.save_messages(self.conversation, self.conversation_settings())
        self.saver.shown_branch_changed(self.conversation)
        return edited

    def fork_at(self, message: Message) -> None:
        """Continue, as a new saved conversation, the branch shown up to and
        including `message` (with this conversation's settings)."""
        settings = self.conversation_settings()
        self.leave()
        forked = self.conversation.fork_at(message)
        self.conversation = forked
        self._outside_window = set()
        self.saver.save_messages(forked, settings)

    # Conversations.

    def leave(self, wait: float = SAVE_WAIT_S) -> None:
        """The conversation (the branch shown) is left, or the app quits: its KV
        cache is saved, in the background, for instant resume. `wait`: how long
        for the engine to finish a batch of work done ahead of time."""
        engine, store, conv_id = self.engine, self.saver.store, self.conversation.id
        if engine is not None and store is not None and conv_id is not None:
            key = conversation_key(store.path, conv_id)
            self.resumer.save_in_background(engine, key, wait)

    def resume(
        self,
        engine: Engine,
        prompt: ChatMessages,
        add_generation_prompt: bool,
        tools: Sequence[ToolDefinition] = (),
    ) -> int:
        """Put back a saved KV cache that holds more of `prompt` (with `tools`
        offered) than the engine does (in a thread: it tokenizes and reads a
        file). Returns tokens restored."""
        self.resume_pending = False
        tokens = engine.tokenize_chat(prompt, add_generation_prompt, tools)
        return self.resumer.restore_for(engine, tokens)

    def resume_before_reply(
        self, engine: Engine, prompt: ChatMessages, tools: Sequence[ToolDefinition] = ()
    ) -> int:
        """`resume`, for a reply sent before a prefill tried it (sent at once
        after opening a conversation or switching branches); else nothing."""
        return self.resume(engine, prompt, True, tools) if self.resume_pending else 0

    def resumable(self) -> set[int]:
        """Saved conversations whose KV cache is saved for the model loaded."""
        engine, store = self.engine, self.saver.store
        if engine is None or store is None:
            return set()
        return self.resumer.resumable(engine, store.path)

    def new_conversation(self) -> None:
        self.leave()
        self.settings = self.defaults
        self.conversation = Conversation(system_prompt=self.settings.chat.system_prompt)
        self._outside_window = set()

    def save_all(self, reply_text: str | None = None, reply_thinking: str | None = None) -> None:
        """Write whatever is not saved yet: after the database opened late, or on
        a timer while writes fail (`reply_text`, `reply_thinking`: the streaming
        reply so far)."""
        if self.saver.failing:
            self.saver.retry(
                self.conversation, self.conversation_settings(), reply_text, reply_thinking
            )
        elif self.conversation.messages:
            self.saver.save_messages(self.conversation, self.conversation_settings())

    def fork(self) -> None:
        """Continue the conversation, as held here, as a new saved one (another
        window changed the saved one)."""
        self.saver.fork(self.conversation, self.conversation_settings())

    def load(self, conv_id: int) -> tuple[Conversation, dict[str, Any]]:
        """A saved conversation and its sampling settings; raises `KvchatError`."""
        store = self.saver.store
        if store is None:
            raise KvchatError("Conversations are not being saved, so none can be opened.")
        return store.get_conversation(conv_id), store.get_sampling(conv_id)

    def open(self, conversation: Conversation, sampling: dict[str, Any]) -> None:
        """Continue `conversation` with its own system prompt and `sampling`."""
        self.leave()
        self.resume_pending = True
        defaults = self.defaults
        self.settings = replace(defaults, sampling=restore_sampling(sampling, defaults.sampling))
        self.conversation = conversation
        self._outside_window = set()
        self.saver.opened(
            conversation,
            ConversationSettings(
                conversation.system_prompt,
                sampling,
                conversation.model_path,
                conversation.model_name,
                conversation.backend,
                conversation.server_url,
                conversation.preset,
                conversation.tool_switches,
            ),
        )

    def use_preset(self, preset: Preset) -> None:
        """Continue this conversation with `preset`'s system prompt and sampling
        (on top of the defaults, for this conversation only), and record its
        name; saved at once when the conversation is. The whole prompt changes
        with the system prompt: the next reply evaluates it all again."""
        defaults = self.defaults
        self.settings = replace(defaults, sampling=preset.sampling_for(defaults.sampling))
        self.conversation.system_prompt = preset.system_prompt_for(defaults.chat.system_prompt)
        self.conversation.preset = preset.name
        self._outside_window = set()
        if self.conversation.messages:
            self.saver.save_messages(self.conversation, self.conversation_settings())

    def change_sampling(self, **values: Any) -> None:
        """Change sampling settings for this conversation only (the defaults
        stay): saved with it at once when it has messages, else with its first."""
        if self.settings is self.defaults:
            self.settings = replace(self.defaults, sampling=copy.deepcopy(self.defaults.sampling))
        self.settings.sampling = replace(self.settings.sampling, **values)
        if self.conversation.messages:
            self.saver.save_messages(self.conversation, self.conversation_settings())

    def switch_tools(self, switches: ToolSwitches) -> None:
        """The tools turned off in this conversation changed (the tools pane,
        the palette): saved with it at once when it has messages, else with
        its first, so that reopening it offers the model the same tools."""
        if switches == self.conversation.tool_switches:
            return
        self.conversation.tool_switches = switches
        if self.conversation.messages:
            self.saver.save_messages(self.conversation, self.conversation_settings())

    def defaults_changed(self, sampling: Mapping[str, Any]) -> None:
        """The settings pane changed the defaults' chat and UI settings, and the
        sampling settings in `sampling`: a reopened conversation's own copy (a
        preset's) takes those too, keeping its other values, and the saved KV
        caches' folder its new size limit (applied at the next save)."""
        self.resumer.cache.limit_bytes = self.defaults.chat.resume_cache_mb * MIB
        if self.settings is not self.defaults:
            self.settings.sampling = replace(self.settings.sampling, **sampling)
            self.settings.chat, self.settings.ui = self.defaults.chat, self.defaults.ui

    def conversation_settings(self) -> ConversationSettings:
        """What the conversation's row records: its system prompt, sampling and model."""
        info = self.model
        if info is None:
            model_path = self.conversation.model_path
        else:  # a server's model has no file here (its "path" is its URL)
            model_path = str(info.path) if info.kind == LOCAL_BACKEND else ""
        return ConversationSettings(
            system_prompt=self.conversation.system_prompt,
            sampling=asdict(self.settings.sampling),
            model_path=model_path,
            model_name=info.name if info else self.conversation.model_name,
            backend=info.kind if info else self.conversation.backend,
            server_url=(info.server_url or "") if info else self.conversation.server_url,
            preset=self.conversation.preset,
            tool_switches=self.conversation.tool_switches,
        )

    def made_on_another_server(self) -> str | None:
        """The URL of the model server the conversation was made on, when the
        model in use is not that server's."""
        conversation, info = self.conversation, self.model
        if not conversation.made_on_server or not conversation.server_url or info is None:
            return None
        same = info.server_url is not None and public_url(info.server_url) == public_url(
            conversation.server_url
        )
        return None if same else conversation.server_url

    def made_with_another_model(self) -> Path | None:
        """The model file the conversation was made with, when it is not the one
        in use (it may no longer exist). None for one made on a model server."""
        if not self.conversation.model_path or self.model is None:
            return None
        if self.conversation.made_on_server:
            return None
        path = Path(self.conversation.model_path)
        return None if same_path(path, self.model.path) else path


def whole_reply(reply: Message, reasoning: Reasoning) -> dict[str, Any]:
    """`reply`, a reply that thought, as the model wrote it: the opening marker
    (unless the prompt wrote it), the thinking, and once it was closed (a
    thought may close on the reply's last tokens: an empty answer), the
    closing marker and the answer; with its sampled tokens, which spell that
    (whitespace between the parts may differ: the engine then sends the text)."""
    markers = reasoning.markers
    text = ("" if reasoning.prompt_opens_block else f"{markers.open}\n") + reply.thinking
    if not reply.thought_open:
        text += f"{markers.close}\n\n{reply.prompt_content}"
    data: dict[str, Any] = {"role": "assistant", "content": text, "sampled_whole": True}
    if reply.token_ids:
        data["token_ids"] = reply.token_ids
    return data
