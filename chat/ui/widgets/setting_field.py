"""One setting in the settings pane: its name, an input that suits its kind,
its help line with the allowed range, and an inline error while the value typed
is not valid.

The field is built from a `FieldSpec` alone, so every setting in
`chat.config.FIELDS` gets one without code of its own. Each change is checked
with `config.parse_value`, the same check the config file and the CLI use, and
posted as `SettingField.Changed`; `value` only ever holds a valid value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch, TextArea

from chat.errors import ConfigError
from chat.sanitize import sanitize
from chat.settings.schema import FieldSpec
from chat.settings.values import parse_value
from chat.ui.untrusted import UntrustedTextArea

Control = Input | Switch | Select[object] | TextArea

# Characters an Input accepts while typing, by kind (the whole value must match).
# Values set from code are not restricted, and parse_value checks every value.
_FLOAT_TYPING = r"[-+]?\d*\.?\d*(?:[eE][-+]?\d*)?"
_UNSIGNED_TYPING = r"\d*"
_SIGNED_TYPING = r"-?\d*"


def display_text(spec: FieldSpec, value: object) -> str:
    """How a parsed value is shown in a text field: blank for None, one stop
    sequence per line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value)


def _typing_pattern(spec: FieldSpec) -> str | None:
    if spec.kind == "float":
        return _FLOAT_TYPING
    if spec.kind in ("int", "optional_int"):
        lowest = min(
            [spec.minimum or 0] + [v for v in spec.special_values() if isinstance(v, (int, float))]
        )
        return _SIGNED_TYPING if lowest < 0 else _UNSIGNED_TYPING
    return None


def _placeholder(spec: FieldSpec) -> str:
    if spec.kind in ("optional_int", "optional_path", "optional_str"):
        return spec.none_label() + (" each reply" if spec.key == "sampling.seed" else "")
    return ""


class SettingField(Vertical):
    """The form field of one setting."""

    @dataclass
    class Changed(Message):
        """The user changed `field`; its `error` is set while the value is invalid."""

        field: SettingField

        @property
        def control(self) -> SettingField:
            return self.field

    def __init__(
        self,
        spec: FieldSpec,
        value: object,
        *,
        choices: Sequence[tuple[str, object]] | None = None,
        note: str | None = None,
    ) -> None:
        """`choices` turns a text setting into a Select of (label, raw value)
        pairs (the model file, the theme); `note` is shown after the help line."""
        super().__init__(
            id="setting-" + spec.key.replace(".", "-").replace("_", "-"),
            classes="setting-field",
        )
        self.spec = spec
        self.value: object = value
        """The last valid value: the initial one until the user changes it."""
        self.error: str | None = None
        self._choices = list(choices) if choices is not None else None
        if self._choices is None and spec.kind == "choice":
            self._choices = [(str(choice), choice) for choice in spec.choices or ()]
        self._note = note
        # The raw widget value that stands for `self.value` exactly, so that a
        # value shown but not edited is kept as it is (no text round trip).
        self._shown_raw: object = self._raw_for(value)
        self._shown_value: object = value
        self._last_raw: object = self._shown_raw

    # -- building ------------------------------------------------------------

    def _raw_for(self, value: object) -> object:
        if self._choices is not None:
            optional_text = self.spec.kind in ("optional_path", "optional_str")
            return "" if value is None and optional_text else value
        if self.spec.kind == "bool":
            return bool(value)
        return display_text(self.spec, value)

    def _make_control(self) -> Control:
        spec = self.spec
        raw = self._shown_raw
        if self._choices is not None:
            options = list(self._choices)
            if all(option != raw for _, option in options):
                options.insert(0, (f"{display_text(spec, raw)} (current)", raw))
            return Select(
                [(Content(label), option) for label, option in options],
                value=raw,
                allow_blank=False,
                compact=True,
                classes="setting-control",
            )
        if spec.kind == "bool":
            return Switch(value=bool(raw), classes="setting-control")
        if spec.kind in ("text", "str_list"):
            area = UntrustedTextArea(
                str(raw),
                soft_wrap=True,
                show_line_numbers=False,
                compact=True,
                classes="setting-control",
            )
            area.add_class("multiline")
            return area
        return Input(
            sanitize(str(raw)),
            placeholder=_placeholder(spec),
            restrict=_typing_pattern(spec),
            compact=True,
            select_on_focus=False,
            classes="setting-control",
        )

    def compose(self) -> ComposeResult:
        # Name, control and range on one row, the help line under them; the
        # error line is added only while there is an error (the pane has one
        # field per setting, and every widget costs when it opens).
        with Horizontal(classes=f"setting-row kind-{self.spec.kind}"):
            yield Label(Content(self.spec.name), classes="setting-name")
            yield self._make_control()
            yield Label(Content(self.spec.range_text()), classes="setting-range")
        help_text = self.spec.help + (f"  {self._note}" if self._note else "")
        yield Static(Content(help_text), classes="setting-help")

    # -- reading and setting -------------------------------------------------

    @property
    def control(self) -> Control:
        return self.query_one(".setting-control", Widget)  # type: ignore[return-value]

    @property
    def valid(self) -> bool:
        return self.error is None

    def raw(self) -> object:
        """What the widget holds now: text, a bool, or the selected option."""
        control = self.control
        if isinstance(control, Switch):
            return control.value
        if isinstance(control, TextArea):
            return control.text
        return control.value

    def set_value(self, value: object) -> None:
        """Show an already valid value (e.g. the default), replacing any edit."""
        self.value = self._shown_value = value
        self._shown_raw = raw = self._raw_for(value)
        self._set_error(None)
        control = self.control
        if isinstance(control, Select):
            if all(option != raw for _, option in self._choices or ()):
                self._choices = [(f"{display_text(self.spec, raw)}", raw), *(self._choices or [])]
                control.set_options([(Content(label), option) for label, option in self._choices])
            control.value = raw
        elif isinstance(control, Switch):
            control.value = bool(raw)
        elif isinstance(control, TextArea):
            if control.text != raw:
                control.load_text(str(raw))
        else:
            control.value = sanitize(str(raw))

    def check(self) -> None:
        """Validate what the widget holds; keep it as `value` if it is valid."""
        raw = self.raw()
        if raw == self._shown_raw and type(raw) is type(self._shown_raw):
            self.value = self._shown_value
            self._set_error(None)
            return
        try:
            self.value = parse_value(self.spec.key, raw)
        except ConfigError as error:
            self._set_error(str(error))
        else:
            self._set_error(None)

    def _set_error(self, message: str | None) -> None:
        if message == self.error:
            return
        self.error = message
        self.set_class(message is not None, "invalid")
        labels = self.query(".setting-error")
        if message is None:
            labels.remove()
        elif labels:
            labels.first(Static).update(Content(message))
        else:
            self.mount(Static(Content(message), classes="setting-error"))

    # -- events from the control ---------------------------------------------

    @on(Input.Changed)
    @on(Switch.Changed)
    @on(Select.Changed)
    @on(TextArea.Changed)
    def _control_changed(self, event: Message) -> None:
        event.stop()
        raw = self.raw()
        if raw == self._last_raw and type(raw) is type(self._last_raw):
            return  # e.g. the control announcing its first value
        self._last_raw = raw
        self.check()
        self.post_message(self.Changed(self))
