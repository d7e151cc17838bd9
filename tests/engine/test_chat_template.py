"""A chat template is a stranger's code: rendering one stops at its limits
(steps, time, size) and names the reason in one sentence, never hangs, never
fills the memory, never lets a raw Jinja traceback out."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from chat.engine import chat_template
from chat.engine.chat_template import ChatTemplate
from chat.errors import ChatTemplateError
from tests.hostile_files import returns_within

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
HELLO = [{"role": "user", "content": "Hello"}]

AMPLIFIERS = {
    "a format width with %": "{{ '%0999999999d' % 1 }}",
    "a format width with the format filter": "{{ '%0999999999d'|format(1) }}",
    "a format width with str.format": "{{ '{:>999999999}'.format(1) }}",
    "replace": "{% set s = 'a' * 100000 %}{{ s.replace('a', 'a' * 1000) }}",
    "the replace filter": "{% set s = 'a' * 100000 %}{{ s|replace('a', 'a' * 1000) }}",
    "expandtabs": "{{ ('\\t' * 100000).expandtabs(100000) }}",
    "indent": "{{ ('a\\n' * 400000)|indent(1000) }}",
    "wordwrap": "{{ ('a ' * 400000)|wordwrap(1, true, '\\n' * 1000) }}",
}

HOSTILE_TEMPLATES: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "nested loops": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        # Whichever limit comes first on this machine.
        ("took more than 2,000,000 steps", "ran longer than 1 s"),
    ),
    "doubling a namespace string": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "built a value larger than",
    ),
    "doubling with +": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
        "{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "built a value larger than",
    ),
    "a huge repeat": ("{{ 'x' * 100000000 }}", "built a value larger than"),
    "100 MB of output": (
        "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
        "wrote more than 1 MiB",
    ),
    "a huge power": ("{{ 9 ** 999999999 }}", "raised a number to the power 999,999,999"),
    "a huge filter width": ("{{ 'x'|center(1000000000) }}", "asked for 1,000,000,000 characters"),
    # One call into Python that builds gigabytes before the next step: each is
    # refused before it runs (AMPLIFIERS below checks the memory too).
    **{name: (source, "built a value larger than") for name, source in AMPLIFIERS.items()},
    "a huge method width": ("{{ 'x'.ljust(999999999) }}", "asked for 999,999,999 characters"),
    "a huge lipsum": ("{{ lipsum(99999999) }}", "asked for 99,999,999 characters"),
    "a wide tojson indent": (
        "{{ (range(99999)|list)|tojson(indent=100000) }}",
        "asked tojson for an indent of 100,000",
    ),
    "squaring a number": (
        "{% set ns = namespace(x=3) %}{% for i in range(64) %}"
        "{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x }}",
        "computed a number of more than 65,536 bits",
    ),
    "a macro calling itself": (
        "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
        "failed: it calls itself too deeply",
    ),
    "raise_exception": (
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}",
        "failed: Conversation roles must alternate user/assistant",
    ),
    "an undefined call": ("{{ nothing() }}", "failed: 'nothing' is undefined (UndefinedError)"),
    "Python's insides": (
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "failed: access to attribute '__class__' of 'str' object is unsafe (SecurityError)",
    ),
}


@pytest.mark.parametrize("name", HOSTILE_TEMPLATES)
def test_a_hostile_template_is_stopped_with_its_reason(name: str) -> None:
    source, reason = HOSTILE_TEMPLATES[name]
    template = ChatTemplate(source, model="evil.gguf", eos_token="</s>", bos_token="<s>")
    started = time.monotonic()
    with pytest.raises(ChatTemplateError) as refused:
        returns_within(lambda: template(messages=HELLO), seconds=20)
    assert time.monotonic() - started < chat_template.RENDER_SECONDS + 2
    message = str(refused.value)
    assert message.startswith("The chat template of evil.gguf ")
    reasons = (reason,) if isinstance(reason, str) else reason
    assert any(reason in message for reason in reasons), message
    assert "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("name", AMPLIFIERS)
def test_an_amplifying_call_is_refused_before_it_takes_the_memory(name: str) -> None:
    template = ChatTemplate(AMPLIFIERS[name], model="evil.gguf", eos_token="", bos_token="")
    tracemalloc.start()
    try:
        with pytest.raises(ChatTemplateError):
            template(messages=HELLO)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{peak:,} bytes at the peak"


def test_a_template_that_loops_is_stopped_by_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "MAX_STEPS", 10**12)
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    template = ChatTemplate(source, model="evil.gguf", eos_token="", bos_token="")
    started = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"ran longer than 1 s\.$"):
        returns_within(lambda: template(messages=HELLO), seconds=20)
    assert time.monotonic() - started < 3


def test_a_template_with_bad_syntax_is_named_with_its_line() -> None:
    with pytest.raises(ChatTemplateError) as refused:
        ChatTemplate("hello\n{% for %}", model="bad.gguf", eos_token="", bos_token="")
    assert str(refused.value).startswith("The chat template of bad.gguf is not valid Jinja: ")
    assert str(refused.value).endswith("(line 2).")


def test_a_huge_template_source_is_refused_unread() -> None:
    with pytest.raises(ChatTemplateError, match="is larger than 1 MiB"):
        ChatTemplate("x" * (2 << 20), model="big.gguf", eos_token="", bos_token="")


def test_the_template_s_own_message_is_made_safe() -> None:
    source = "{{ raise_exception('bad\\x1b]0;owned\\x07 role') }}"
    template = ChatTemplate(source, model="evil.gguf", eos_token="", bos_token="")
    with pytest.raises(ChatTemplateError) as refused:
        template(messages=HELLO)
    assert "\x1b" not in str(refused.value) and "\x07" not in str(refused.value)


def test_an_ordinary_template_renders_as_llama_cpp_python_s_formatter_does() -> None:
    template = ChatTemplate(CHATML, model="m.gguf", eos_token="</s>", bos_token="<s>")
    rendered = template(messages=[*HELLO, {"role": "assistant", "content": "Hi"}])
    assert rendered.prompt == (
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert rendered.added_special
    tools = "{{ messages|tojson }}{% generation %}G{% endgeneration %}{{ bos_token }}"
    shown = ChatTemplate(tools, model="m.gguf", eos_token="", bos_token="<s>")(messages=HELLO)
    assert shown.prompt == '[{"role": "user", "content": "Hello"}]G<s>'


def test_a_long_conversation_fits_the_limits() -> None:
    template = ChatTemplate(CHATML, model="m.gguf", eos_token="", bos_token="")
    messages = [{"role": "user", "content": "word " * 2000} for _ in range(500)]
    assert len(template(messages=messages).prompt) > 5_000_000
