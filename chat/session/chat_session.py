"""One conversation being held: its messages and settings, how each turn
fills the context window, and its saving. The chat screen shows it and feeds
it the user's actions; no Textual here.

`settings` are the conversation's own: a reopened conversation gets a copy
with its saved sampling settings, and `defaults` (what new conversations
start from, changed by the settings pane) stay as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from chat.conversations.conversation import Conversation, Message
from chat.conversations.saver import ConversationSaver, ConversationSettings, restore_sampling
from chat.engine.base import ChatMessages, Engine, Finished, ModelInfo
from chat.errors import KvchatError
from chat.model_files import same_path
from chat.session.context_window import (
    ContextBudget,
    WindowPlan,
    history_messages,
    prompt_messages,
)
from chat.session.model_loader import ModelLoader
from chat.settings.schema import Settings


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
        self._budget: ContextBudget | None = None
        self._outside_window: set[int] = set()
        """id() of the messages outside the window at the last turn."""
        self._system_tokens = 0

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
        if self._budget is None or self._budget.tokenize != engine.tokenize_chat:
            self._budget = ContextBudget(engine.tokenize_chat, engine.info.n_ctx)
        return self._budget

    # Planning a turn.

    def plan(self, new_text: str | None) -> WindowPlan | None:
        """How a turn sending `new_text` (None: regenerating the last reply) fills
        the window; None while no model is ready."""
        if self.budget is None:
            return None
        return self.budget.plan(
            self.conversation.system_prompt,
            self.conversation.messages,
            new_text,
            self.settings.sampling.max_tokens,
            self.settings.chat.overflow,
        )

    def reply_prompt(self, plan: WindowPlan) -> list[dict[str, str]]:
        """What the reply to the conversation's last message is generated from."""
        return prompt_messages(self.conversation, plan)

    def prefill_prompt(self, text: str) -> tuple[ChatMessages, bool] | None:
        """What to evaluate ahead while the user pauses over `text`: the prompt that
        sending it would send (True: a message), or with no text the conversation
        so far (False: just opened, its first reply then evaluates little more
        than the new message). None when there is nothing to do."""
        plan = self.plan(text)
        if plan is None or plan.problem:
            return None
        if text.strip():
            return prompt_messages(self.conversation, plan, Message("user", text)), True
        if self.conversation.messages:
            return history_messages(self.conversation, plan), False
        return None

    def mark_window(self, plan: WindowPlan) -> None:
        """Remember which messages are outside the window this turn."""
        messages = self.conversation.messages
        self._outside_window = {id(messages[i]) for i in plan.left_out}
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

    # One turn.

    def add_user_message(self, text: str, plan: WindowPlan) -> Message:
        """The user's message joins the conversation and is saved at once, before
        the reply starts: a crash mid-reply never loses the question."""
        assert self.budget is not None
        messages = self.conversation.messages
        opening = self.budget.generation_prompt_tokens(
            self.conversation.system_prompt, messages[0] if messages else None
        )
        message = Message("user", text, token_count=plan.new - opening)
        messages.append(message)
        self.saver.save_messages(self.conversation, self.conversation_settings())
        return message

    def begin_reply(self, plan: WindowPlan, replaces: int | None = None) -> Message:
        """The reply's message, empty, and its row in the database. `replaces`:
        the saved id of the reply this one regenerates."""
        self.mark_window(plan)
        reply = Message("assistant", "")
        self.saver.start_reply(self.conversation, self.conversation_settings(), reply, replaces)
        return reply

    def end_reply(self, reply: Message, finished: Finished) -> None:
        """The reply is complete: it joins the conversation, whole, and is saved."""
        reply.content, reply.stats = finished.text, finished.stats
        reply.token_probs = list(finished.choices) or None
        self.conversation.messages.append(reply)
        self.saver.finish_reply(finished.text, finished.stats)

    def drop_reply(self, reply: Message) -> None:
        """A reply that failed: gone from the database too."""
        self.saver.discard(self.conversation, reply)

    def take_back_last_message(self) -> Message | None:
        """Remove the last message (a message that did not fit), from the database too."""
        if not self.conversation.messages:
            return None
        last = self.conversation.messages.pop()
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

    # Conversations.

    def new_conversation(self) -> None:
        self.settings = self.defaults
        self.conversation = Conversation(system_prompt=self.settings.chat.system_prompt)
        self._outside_window = set()

    def save_all(self, reply_text: str | None = None) -> None:
        """Write whatever is not saved yet: after the database opened late, or on
        a timer while writes fail (`reply_text`: the streaming reply so far)."""
        if self.saver.failing:
            self.saver.retry(self.conversation, self.conversation_settings(), reply_text)
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
            ),
        )

    def defaults_changed(self) -> None:
        """The settings pane changed the defaults' sampling, chat and UI settings:
        a reopened conversation's own copy takes them too."""
        if self.settings is not self.defaults:
            self.settings.sampling = copy.deepcopy(self.defaults.sampling)
            self.settings.chat, self.settings.ui = self.defaults.chat, self.defaults.ui

    def conversation_settings(self) -> ConversationSettings:
        """What the conversation's row records: its system prompt, sampling and model."""
        info = self.model
        return ConversationSettings(
            system_prompt=self.conversation.system_prompt,
            sampling=asdict(self.settings.sampling),
            model_path=str(info.path) if info else self.conversation.model_path,
            model_name=info.name if info else self.conversation.model_name,
        )

    def made_with_another_model(self) -> Path | None:
        """The model file the conversation was made with, when it is not the one
        in use (it may no longer exist)."""
        if not self.conversation.model_path or self.model is None:
            return None
        path = Path(self.conversation.model_path)
        return None if same_path(path, self.model.path) else path
