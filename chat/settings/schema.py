"""What each setting is: its section, type, default, allowed range and help line.

Each setting is declared once, as a dataclass field whose metadata holds its
`FieldSpec`. `FIELDS` is built from those fields, and everything else
(checking values, the TOML file, environment variables, command-line flags,
the settings pane, `--print-config`) works from `FIELDS`: adding a setting
means adding one field here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

OVERFLOW_POLICIES = ("stop", "drop-oldest", "truncate-middle")
# "auto" is q8_0 when the model runs on the CPU and f16 (llama.cpp's default)
# on a GPU. Measured on the demo model (docs/performance.md): q8_0 keys cut the
# attention cost that grows with the conversation (turn-20 prompt -16 %, the
# cache -45 MB) for a perplexity change of +0.02 %. Values stay f16: quantized
# values need flash attention, which is slower on the CPU.
KEY_CACHE_TYPES = ("auto", "f16", "q8_0")


def key_cache_type_for(setting: str, on_cpu: bool) -> str:
    """The key type `setting` (one of KEY_CACHE_TYPES) stands for, when every
    layer runs on the CPU (`on_cpu`) or not."""
    if setting != "auto":
        return setting
    return "q8_0" if on_cpu else "f16"


# Model servers kvchat can talk to instead of loading a model (issue 17); "auto"
# asks the server what it is. chat.engine.remote reuses this tuple.
SERVER_KINDS: tuple[str, ...] = ("auto", "llama-server", "vllm", "ollama", "openai")
# What `server.url` and `server.api_key_env` take (checked in full by `parse_value`).
URL_PATTERN = (
    r"(?i)https?://"  # the scheme
    r"(?:[^\s/?#@]*@)?"  # a user name and password, kept out of records and listings
    r"(?:\[[0-9a-f:.]+\]|[^\s/?#@:\[\]]+)"  # a host name, IPv4 or [IPv6] address
    r"(?::[0-9]{1,5})?"  # a port
    r"(?:[/?#]\S*)?"  # a path (e.g. /v1)
)
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"

# The kinds of value a setting can hold; the settings pane builds its form
# field from the kind, and `parse_value` checks values by it.
Kind = Literal[
    "float",
    "int",
    "bool",
    "str",  # one line of non-empty text
    "text",  # any text, may be empty or span lines
    "choice",
    "optional_int",  # an int in range, or None
    "optional_path",  # a file path, or None
    "optional_str",  # one line of text (matching `FieldSpec.pattern`, if any), or None
    "str_list",
]


@dataclass(frozen=True)
class FieldSpec:
    """Everything needed to check one setting and to build its form field."""

    key: str
    """Dotted "section.name", e.g. "sampling.temperature"."""
    kind: type | str
    """One of the `Kind` strings."""
    default: object
    help: str
    """One line, shown under the field in the settings pane."""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] | None = None
    special: tuple[tuple[object, str], ...] = ()
    """Values allowed outside minimum..maximum, with what each means, e.g.
    `((0, "the model's own window"),)`; `None` labels the blank value of an
    optional kind."""
    pattern: str | None = None
    """For "optional_str": a regular expression the whole value must match."""
    pattern_text: str = "one line of text"
    """What `pattern` allows, in words: "an http:// or https:// URL"."""
    quote_refused: bool = True
    """False: a refused value is never repeated in a message (what was typed
    where a variable's name belongs may be the secret that variable holds)."""

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]

    def special_values(self) -> tuple[object, ...]:
        return tuple(value for value, _ in self.special)

    def none_label(self) -> str:
        """What leaving an optional field blank means, e.g. "random"."""
        for value, meaning in self.special:
            if value is None:
                return meaning
        return "none"

    def range_text(self) -> str:
        """The allowed values in words, e.g. "0 – 5" or "blank = random, or 0 – 4294967295"."""
        if self.kind == "choice":
            return "one of: " + ", ".join(str(choice) for choice in self.choices or ())
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "any non-empty text"
        if self.kind == "text":
            return "any text"
        if self.kind == "str_list":
            return "a list of non-empty strings"
        if self.kind == "optional_path":
            return f"blank = {self.none_label()}, or a file path"
        if self.kind == "optional_str":
            return f"blank = {self.none_label()}, or {self.pattern_text}"
        parts = []
        for value, meaning in self.special:
            shown = "blank" if value is None else str(value)
            parts.append(f"{shown} = {meaning}")
        if self.kind == "optional_int" and None not in self.special_values():
            parts.append("blank = none")
        span = f"{plain_number(self.minimum)} – {plain_number(self.maximum)}"
        return ", or ".join([*parts, span])


EXACT_WHOLE_NUMBERS = 2**53
"""Up to here a float holds every whole number exactly: written out in full."""


def plain_number(value: float | None) -> str:
    """0 rather than 0.0 in messages; 4294967295 rather than 4.29e+09; but
    1e+300 rather than its 301 digits."""
    if value is None:
        return "?"
    if float(value).is_integer() and abs(value) < EXACT_WHOLE_NUMBERS:
        return str(int(value))
    return str(value)


def _meta(
    kind: Kind,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    choices: tuple[Any, ...] | None = None,
    special: tuple[tuple[object, str], ...] = (),
    pattern: str | None = None,
    pattern_text: str = "one line of text",
    quote_refused: bool = True,
) -> dict[str, object]:
    """Dataclass field metadata: the FieldSpec of a setting, less its key and default."""
    spec = {
        "kind": kind,
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "special": special,
        "pattern": pattern,
        "pattern_text": pattern_text,
        "quote_refused": quote_refused,
    }
    return {"spec": spec}


def _setting(default: object, kind: Kind, help: str, *args: Any, **kwargs: Any) -> Any:
    """A dataclass field with an immutable default that carries its FieldSpec.

    Returns `Any` so that `temperature: float = _setting(0.8, ...)` type-checks.
    """
    return field(default=default, metadata=_meta(kind, help, *args, **kwargs))


@dataclass
class ModelSettings:
    path: str | None = _setting(
        None,
        "optional_path",
        "A .gguf model file. Blank: kvchat finds one itself.",
        special=((None, "find one automatically"),),
    )
    n_ctx: int = _setting(
        0,
        "int",
        "Context window in tokens. 0 uses the window the model was trained with.",
        256,
        1_048_576,
        special=((0, "the model's own window"),),
    )
    n_gpu_layers: int = _setting(
        -1,
        "int",
        "Layers to offload to the GPU; ignored by CPU-only builds.",
        0,
        1000,
        special=((-1, "all layers"),),
    )
    flash_attn: bool = _setting(
        False,
        "bool",
        "Flash attention: faster and leaner on most GPUs; on the CPU, long chats are slower.",
    )
    n_threads: int | None = _setting(
        None,
        "optional_int",
        "CPU threads for generating a reply, a token at a time.",
        1,
        512,
        special=((None, "measured"),),
    )
    n_threads_batch: int | None = _setting(
        None,
        "optional_int",
        "CPU threads for evaluating a prompt.",
        1,
        512,
        special=((None, "measured"),),
    )
    n_batch: int = _setting(512, "int", "Prompt tokens evaluated per batch.", 1, 65_536)
    plain_template: bool = _setting(
        False,
        "bool",
        "Use plain ChatML instead of a model's chat template that fails or runs over its limits.",
    )
    cache_type_k: str = _setting(
        "auto",
        "choice",
        "KV cache key type. auto: q8_0 (leaner, faster long chats) on the CPU, f16 on a GPU.",
        choices=KEY_CACHE_TYPES,
    )


@dataclass
class ServerSettings:
    """A running model server to chat with instead of loading `model.path`.

    The API key itself is never a setting: `api_key_env` names the environment
    variable that holds it (chat.session.server_choice reads it)."""

    url: str | None = _setting(
        None,
        "optional_str",
        "A model server to use instead of a local model, e.g. http://127.0.0.1:8080.",
        special=((None, "use the local model"),),
        pattern=URL_PATTERN,
        pattern_text="an http:// or https:// URL",
    )
    kind: str = _setting(
        "auto",
        "choice",
        "What runs there: auto asks the server itself.",
        choices=SERVER_KINDS,
    )
    model: str | None = _setting(
        None,
        "optional_str",
        "The served model to chat with. Blank: the server's only (or first) model.",
        special=((None, "the server's first model"),),
    )
    api_key_env: str | None = _setting(
        None,
        "optional_str",
        "The environment variable holding the server's API key (its name, never the key).",
        special=((None, "send no key"),),
        pattern=ENV_NAME_PATTERN,
        pattern_text="a variable name (letters, digits, _)",
        quote_refused=False,
    )
    connect_timeout_s: float = _setting(
        5.0, "float", "Seconds to wait for the server to accept a connection.", 0.1, 300
    )
    read_timeout_s: float = _setting(
        300.0,
        "float",
        "Longest wait in seconds for the next part of a reply (a long prompt takes a while).",
        1,
        3600,
    )


@dataclass
class SamplingSettings:
    temperature: float = _setting(
        0.8, "float", "Randomness of replies; 0 always picks the most likely token.", 0, 5
    )
    top_p: float = _setting(
        0.95, "float", "Sample only from the likeliest tokens that add up to this share.", 0, 1
    )
    top_k: int = _setting(
        40, "int", "Sample only from this many likeliest tokens; 0 is off.", 0, 1000
    )
    min_p: float = _setting(
        0.05, "float", "Drop tokens less likely than this share of the likeliest one.", 0, 1
    )
    typical_p: float = _setting(1.0, "float", "Locally typical sampling; 1 is off.", 0, 1)
    repeat_penalty: float = _setting(
        1.0, "float", "Make recently used tokens less likely; 1 is off.", 0, 3
    )
    presence_penalty: float = _setting(
        0.0, "float", "Penalty for any token already in the reply.", -2, 2
    )
    frequency_penalty: float = _setting(
        0.0, "float", "Penalty growing with how often a token appeared.", -2, 2
    )
    mirostat_mode: int = _setting(
        0, "choice", "Mirostat sampling: 0 off, 1 or 2 for its versions.", choices=(0, 1, 2)
    )
    mirostat_tau: float = _setting(5.0, "float", "Mirostat target surprise.", 0, 20)
    mirostat_eta: float = _setting(0.1, "float", "Mirostat learning rate.", 0, 1)
    seed: int | None = _setting(
        None,
        "optional_int",
        "Seed for sampling; the same seed and prompt give the same reply, "
        "whether the conversation was just opened, resumed or kept in memory.",
        0,
        2**32 - 1,
        special=((None, "random"),),
    )
    max_tokens: int = _setting(
        1024, "int", "Most tokens in one reply; also reserved in the window for it.", 1, 131_072
    )
    thinking: bool = _setting(
        True,
        "bool",
        "Let a reasoning model think before it answers; off only where its template "
        "or server can turn thinking off.",
    )
    thinking_budget: int = _setting(
        0,
        "int",
        "Most tokens a reasoning model thinks for; then its thinking is closed and it answers.",
        1,
        131_072,
        special=((0, "no limit"),),
    )
    keep_thinking: bool = _setting(
        False,
        "bool",
        "Send earlier thinking again as it was sampled: the next turn reads less "
        "but the model was not trained on such a history.",
    )
    stop: list[str] = field(
        default_factory=list,
        metadata=_meta(
            "str_list", "Extra stop sequences, one per line: the reply ends before any of them."
        ),
    )

    @property
    def repeatable(self) -> bool:
        """Whether a reply is meant to repeat exactly: a fixed seed, or
        temperature 0 (always the likeliest token). The engine then keeps the
        KV cache as evaluating the conversation from scratch would build it
        (chat.engine.llama, `_prompt_span`), at the cost of reading each reply
        once more, in the background."""
        return self.seed is not None or self.temperature <= 0


@dataclass
class ChatSettings:
    system_prompt: str = _setting(
        "You are a helpful assistant.",
        "text",
        "Sent before every conversation; blank sends none.",
    )
    overflow: str = _setting(
        "drop-oldest",
        "choice",
        "When the conversation outgrows the window: stop, drop oldest turns, or cut the middle.",
        choices=OVERFLOW_POLICIES,
    )
    record_token_probs: bool = _setting(
        True, "bool", "Keep each token's probability for the token view."
    )
    prefill: bool = _setting(
        True, "bool", "When typing pauses, evaluate the message ahead: its reply starts at once."
    )
    resume_cache_mb: int = _setting(
        4096,
        "int",
        "Disk space for saved KV caches, which reopen conversations instantly (MiB).",
        64,
        1_048_576,
        special=((0, "save none"),),
    )


@dataclass
class UISettings:
    theme: str = _setting("kvchat-dark", "str", "Colour theme: a built-in name or a user theme.")
    show_thinking: bool = _setting(
        False,
        "bool",
        "Show a reasoning model's thinking unfolded (else one line: alt+t or a click unfolds it).",
    )
    terminal_scroll: bool = _setting(
        True,
        "bool",
        "Scroll the terminal's own rows with the conversation and draw only the new lines "
        "(off: every row drawn again, for a terminal that draws it wrong).",
    )


@dataclass
class ToolSettings:
    """The tool loop's bounds (chat.session.tool_loop); which servers run is
    the mcpServers file's (chat.tools.config)."""

    max_steps: int = _setting(
        8, "int", "Model replies in one turn at most, each of which may call tools.", 1, 100
    )
    result_token_limit: int = _setting(
        2048,
        "int",
        "A tool result over this many tokens is cut, with a note, before the model reads it.",
        64,
        1_000_000,
    )


@dataclass
class Settings:
    model: ModelSettings = field(default_factory=ModelSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    chat: ChatSettings = field(default_factory=ChatSettings)
    ui: UISettings = field(default_factory=UISettings)
    tools: ToolSettings = field(default_factory=ToolSettings)


def _build_fields() -> dict[str, FieldSpec]:
    """FIELDS in display order: sections as in Settings, fields as declared."""
    specs: dict[str, FieldSpec] = {}
    defaults = Settings()
    for section in dataclasses.fields(Settings):
        section_value = getattr(defaults, section.name)
        for item in dataclasses.fields(section_value):
            key = f"{section.name}.{item.name}"
            specs[key] = FieldSpec(
                key=key, default=getattr(section_value, item.name), **item.metadata["spec"]
            )
    return specs


FIELDS: dict[str, FieldSpec] = _build_fields()
SECTIONS: tuple[str, ...] = tuple(item.name for item in dataclasses.fields(Settings))
