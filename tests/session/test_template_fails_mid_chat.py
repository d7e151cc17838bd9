"""A chat template that renders a first message but fails on a later shape
of conversation (a reply, here): planning the next turn gives the template's
fault as the reason not to send, instead of an exception in the app."""

from __future__ import annotations

from pathlib import Path

from chat.conversations.conversation import Message
from chat.engine.llama import load_engine
from chat.session.context_window import ContextBudget
from chat.settings.schema import ModelSettings
from tests.engine.template_models import with_chat_template

NO_REPLIES = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{{ raise_exception('Replies are not supported') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
)


def test_a_template_failing_mid_conversation_is_a_plan_problem(
    demo_model: Path, tmp_path: Path
) -> None:
    model = with_chat_template(demo_model, tmp_path / "no-replies.gguf", NO_REPLIES)
    engine = load_engine(model, ModelSettings(n_ctx=512), tmp_path / "llama.log")
    try:
        budget = ContextBudget(engine.tokenize_chat, engine.info.n_ctx)
        first = budget.plan("", [], "Hello", 64, "drop-oldest")
        assert first.problem is None and first.new > 0
        messages = [Message(role="user", content="Hello"), Message(role="assistant", content="Hi")]
        later = budget.plan("", messages, "And now?", 64, "drop-oldest")
        assert later.problem == (
            "The chat template of no-replies.gguf failed: Replies are not supported."
        )
    finally:
        engine.close()
