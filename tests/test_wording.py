from chat.conversations.conversation import Message, ReplyStats
from chat.ui.widgets.message_view import MessageView, reply_summary
from chat.wording import counted


def test_counts_take_the_noun_in_their_number() -> None:
    assert counted(0, "token") == "0 tokens"
    assert counted(1, "token") == "1 token"
    assert counted(12_345, "token") == "12,345 tokens"
    assert counted(2, "match", "matches") == "2 matches"


def test_a_one_token_message_and_reply_say_one_token() -> None:
    message = Message("user", "Hi")
    message.token_count = 1
    assert "You · 1 token" in str(MessageView(message).header_text())
    stats = ReplyStats(
        prompt_tokens=10,
        prompt_evaluated=10,
        generated_tokens=1,
        ttft_s=0.1,
        decode_tps=0.0,
        finish_reason="done",
        seed=7,
        total_s=0.1,
    )
    assert reply_summary(stats).startswith("1 token · ")


def test_a_reply_of_one_token_says_no_rate() -> None:
    """The rate counts the tokens after the first: a reply stopped at its
    first token said "0.0 tok/s", as if the model had stalled."""
    from dataclasses import replace

    from chat.conversations.transcript.markdown import _stats_line

    one = ReplyStats(10, 10, 1, 0.21, 0.0, "stopped", seed=7, total_s=0.21)
    assert reply_summary(one) == "1 token · first token 0.21 s · seed 7"
    assert "tokens/s" not in _stats_line(one)
    two = replace(one, generated_tokens=2, decode_tps=40.0)
    assert reply_summary(two) == "2 tokens · 40.0 tok/s · first token 0.21 s · seed 7"
    assert "40.0 tokens/s" in _stats_line(two)
