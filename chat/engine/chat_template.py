"""Rendering a GGUF's chat template, which is code from a stranger.

A template is Jinja. jinja2's sandbox keeps it from Python's insides, but
not from looping or growing without end: `{% for i in range(99999) %}` nested
twice never ends, and doubling a string thirty times fills the memory. So a
render here, besides the sandbox, has limits it checks as it goes:

- steps: every loop turn over `range`, every call, attribute or item lookup,
  operator and filter counts one; at most `MAX_STEPS` per render;
- time: at most `RENDER_SECONDS`, checked at each step and each piece written;
- size: the text written, and every string or list a template builds (by
  `+`, `*`, `~` passed on, a filter, a namespace), at most the output limit:
  `OUTPUT_FLOOR` plus a few times the conversation's own text;
- the template's own source: at most `MAX_SOURCE_BYTES`.

Whatever goes wrong (a limit, the template's own `raise_exception`, a Jinja
error) is a `chat.errors.ChatTemplateError` naming the model and the reason in one
sentence. The rendering matches llama-cpp-python's `Jinja2ChatFormatter`
(the same environment options, extensions, `tojson`, globals). No Textual here.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import Namespace

from chat.errors import ChatTemplateError
from chat.safe_files import human_limit
from chat.sanitize import sanitize_line

MAX_SOURCE_BYTES = 1024 * 1024
RENDER_SECONDS = 1.0
MAX_STEPS = 2_000_000
OUTPUT_FLOOR = 1024 * 1024
"""A prompt may be this much longer than its messages' text (the template's
own words around each message), and four times the text besides."""
MAX_INT_BITS = 1 << 16
"""An integer a template computes stays below 2**65536 (squaring one in a loop
would otherwise take the memory and a single step longer than any deadline)."""
MAX_JSON_INDENT = 64
"""`tojson(indent=...)` repeats the indent on every nested line."""

PLAIN_TEMPLATE_HINT = (
    "Start kvchat with --plain-template (or set plain_template = true under "
    "[model]) to use plain ChatML instead."
)


_DIGITS = re.compile(r"\d+")


class _Overrun(Exception):
    """A render went over one of its limits; the message is the reason."""


class _IgnoreGenerationTags(jinja2.ext.Extension):
    """Hugging Face's `{% generation %}` tag renders its body as it is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _Budget(threading.local):
    """The limits of the render under way on this thread (the UI thread and
    the engine thread render at once, with one environment each or shared)."""

    deadline = 0.0
    steps = 0
    size_limit = OUTPUT_FLOOR


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Each nested line repeats the indent: a wide one multiplies the output.
    if isinstance(indent, int) and indent > MAX_JSON_INDENT:
        raise _Overrun(f"asked tojson for an indent of {indent:,}")
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise ValueError(message)


def _strftime_now(form: str) -> str:
    return datetime.now().strftime(form)


class _GuardedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with every step counted against this thread's budget."""

    # Intercepted operators are also never folded at compile time, so
    # `{{ 9 ** 9 ** 9 }}` is not computed while the template compiles.
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols],
        )
        self.budget = _Budget()
        self.filters["tojson"] = _tojson
        self.filters = {name: self._guarded_filter(name, f) for name, f in self.filters.items()}
        self.globals["range"] = self._range
        self.globals["namespace"] = self._namespace_class()

    def step(self) -> None:
        budget = self.budget
        budget.steps += 1
        if budget.steps > MAX_STEPS:
            raise _Overrun(f"took more than {MAX_STEPS:,} steps")
        if budget.steps % 256 == 0 and time.monotonic() > budget.deadline:
            raise _Overrun(f"ran longer than {RENDER_SECONDS:g} s")

    def check_size(self, value: object) -> object:
        if isinstance(value, (str, bytes, list, tuple, dict)):
            self.check_growth(len(value))
        if type(value) is int and value.bit_length() > MAX_INT_BITS:
            raise _Overrun(f"computed a number of more than {MAX_INT_BITS:,} bits")
        return value

    def check_growth(self, size: int) -> None:
        """Refuse, before it runs, one operation whose result would be `size`
        long: a single call into Python (a format width, `replace`,
        `expandtabs`, `indent`) can build gigabytes before the next step."""
        if size > self.budget.size_limit:
            raise _Overrun(f"built a value larger than {human_limit(self.budget.size_limit)}")

    def check_width(self, value: object) -> None:
        # `center(10**9)`, `ljust(10**9)`, `lipsum(10**9)`: a width or count is
        # never that large.
        if type(value) is int and abs(value) > self.budget.size_limit:
            raise _Overrun(f"asked for {value:,} characters")

    def check_format(self, form: object) -> None:
        """`'%0999999999d' % 1`, `'{:>999999999}'.format(1)`: every number in
        a format string counts as a width (a real template's are small)."""
        if isinstance(form, str):
            self.check_growth(len(form) + sum(int(run[:12]) for run in _DIGITS.findall(form)))

    def _range(self, *args: int) -> Iterator[int]:
        # The sandbox's own range refuses over 100,000 items; nested loops of
        # that size are counted here, one step per turn.
        for number in safe_range(*args):
            self.step()
            yield number

    def _guarded_filter(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.step()
            for value in (*args, *kwargs.values()):
                self.check_size(value)
                self.check_width(value)
            self._check_filter(name, args, kwargs)
            return self.check_size(function(*args, **kwargs))

        # Filters that take the context or the environment keep their mark.
        if hasattr(function, "jinja_pass_arg"):
            guarded.jinja_pass_arg = function.jinja_pass_arg  # type: ignore[attr-defined]
        return guarded

    def _check_filter(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The filters whose result can be many times what they are given."""
        texts = [value for value in args if isinstance(value, str)]
        if not texts:
            return
        subject = texts[0]
        if name == "format":
            self.check_format(subject)
        elif name == "replace" and len(texts) >= 3:
            self.check_replace(subject, texts[1], texts[2])
        elif name == "indent":
            width = kwargs.get("width", args[1] if len(args) > 1 else 4)
            each = len(width) if isinstance(width, str) else width if type(width) is int else 4
            self.check_growth(len(subject) + (subject.count("\n") + 1) * max(each, 0))
        elif name == "wordwrap":
            wrap = kwargs.get("wrapstring") or next(iter(texts[1:]), "\n")
            width = next((a for a in args if type(a) is int), kwargs.get("width", 79))
            lines = len(subject) // max(int(width), 1) + 1
            self.check_growth(len(subject) + lines * len(wrap))

    def check_replace(self, subject: str, old: str, new: str) -> None:
        if len(new) > len(old):
            found = len(subject) + 1 if not old else subject.count(old)
            self.check_growth(len(subject) + found * (len(new) - len(old)))

    def _check_method(self, method: object, args: tuple[Any, ...]) -> None:
        """String methods that can grow far past their arguments (`ljust` and
        the like are caught by their width)."""
        subject = getattr(method, "__self__", None)
        if not isinstance(subject, str):
            return
        name = getattr(method, "__name__", "")
        if name == "expandtabs":
            tab = args[0] if args and type(args[0]) is int else 8
            self.check_growth(len(subject) * max(tab, 1))
        elif name == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
            self.check_replace(subject, args[0], args[1])

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        # The sandbox swaps `str.format` for its own function when it is looked
        # up, so its format string is checked here.
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            self.check_format(value.__self__)
        return wrapped

    def _namespace_class(self) -> type[Namespace]:
        environment = self

        class GuardedNamespace(Namespace):
            def __setitem__(self, name: str, value: Any) -> None:
                environment.step()
                super().__setitem__(name, environment.check_size(value))

        return GuardedNamespace

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        self.step()
        if operator == "%" and isinstance(left, str):
            self.check_format(left)
        if operator == "**" and isinstance(right, int) and abs(right) > 1024:
            raise _Overrun(f"raised a number to the power {right:,}")
        if operator == "*":
            for count, other in ((left, right), (right, left)):
                if type(count) is int and isinstance(other, (str, list, tuple)):
                    self.check_growth(count * len(other))
        return self.check_size(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.step()
        for value in (*args, *kwargs.values()):
            __self.check_size(value)
            __self.check_width(value)
        __self._check_method(__obj, args)
        return __self.check_size(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)


@dataclass(frozen=True)
class Rendered:
    """A rendered prompt, shaped as llama-cpp-python's formatter response."""

    prompt: str
    added_special: bool = True
    """The template writes the BOS itself when the model wants one (as with
    llama-cpp-python's formatter): the tokenizer adds none."""


class ChatTemplate:
    """One compiled chat template; `render` (or calling it) renders a
    conversation within the limits. Raises `ChatTemplateError`."""

    def __init__(
        self,
        source: str,
        *,
        model: str,
        eos_token: str,
        bos_token: str,
        add_generation_prompt: bool = True,
    ) -> None:
        self.model = model
        self._eos_token = eos_token
        self._bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        if len(source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
            raise ChatTemplateError(model, f"is larger than {human_limit(MAX_SOURCE_BYTES)}")
        self._environment = _GuardedEnvironment()
        try:
            self._template = self._environment.from_string(source)
        except jinja2.TemplateSyntaxError as error:
            where = f" (line {error.lineno})" if error.lineno else ""
            reason = f"is not valid Jinja: {_one_line(error.message or str(error))}{where}"
            raise ChatTemplateError(model, reason) from None
        except Exception as error:
            raise ChatTemplateError(model, f"cannot be read: {_describe(error)}") from None

    def __call__(self, *, messages: Sequence[Mapping[str, Any]], **extra: Any) -> Rendered:
        return Rendered(self.render(messages, **extra))

    def render(self, messages: Sequence[Mapping[str, Any]], **extra: Any) -> str:
        budget = self._environment.budget
        text_size = sum(len(str(m.get("content") or "")) for m in messages)
        budget.size_limit = OUTPUT_FLOOR + 4 * text_size
        budget.steps = 0
        budget.deadline = time.monotonic() + RENDER_SECONDS
        pieces: list[str] = []
        written = 0
        try:
            for piece in self._template.generate(
                messages=messages,
                eos_token=self._eos_token,
                bos_token=self._bos_token,
                raise_exception=_raise_exception,
                add_generation_prompt=self.add_generation_prompt,
                strftime_now=_strftime_now,
                **extra,
            ):
                written += len(piece)
                if written > budget.size_limit:
                    raise _Overrun(f"wrote more than {human_limit(budget.size_limit)}")
                if time.monotonic() > budget.deadline:
                    raise _Overrun(f"ran longer than {RENDER_SECONDS:g} s")
                pieces.append(piece)
        except _Overrun as overrun:
            raise ChatTemplateError(self.model, str(overrun)) from None
        except Exception as error:  # the template's own code: anything may be raised
            raise ChatTemplateError(self.model, f"failed: {_describe(error)}") from None
        return "".join(pieces)


def _one_line(text: str, most: int = 200) -> str:
    line = sanitize_line(text)
    return line if len(line) <= most else line[: most - 1] + "…"


def _describe(error: BaseException) -> str:
    """An error raised while rendering, in words: the template's own message
    (`raise_exception`) as it is, other errors with their kind."""
    if isinstance(error, RecursionError):
        return "it calls itself too deeply"
    if isinstance(error, MemoryError):
        return "it ran out of memory"
    message = _one_line(str(error)).rstrip(".")
    if isinstance(error, ValueError) and message:
        return message
    kind = type(error).__name__
    return f"{message} ({kind})" if message else kind
