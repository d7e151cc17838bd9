"""The settings pane (F2): every setting in `chat.config.FIELDS`, by section.

The form is built from FIELDS: one `SettingField` per setting, each checked
with `config.parse_value` as it changes. The pane edits a copy of the settings
and returns it; the app applies it (and saves it, for Save). While any field is
invalid, Save and Apply are disabled and nothing is returned.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Static

from chat.settings.schema import FIELDS, SECTIONS, Settings
from chat.settings.values import get_value, set_value
from chat.ui.screens.base import Dialog
from chat.ui.widgets.setting_field import SettingField

# Sampling first: it is what people change most.
SECTION_ORDER: tuple[str, ...] = ("sampling", "chat", "model", "ui")
SECTION_TITLES = {
    "sampling": "Sampling",
    "chat": "Chat",
    "model": "Model",
    "ui": "Interface",
    "tools": "Tools",
}
SECTION_NOTES = {
    "sampling": "Used from the next reply on.",
    "chat": "The system prompt is used by new conversations, and by the current one "
    "if it has no messages yet; a conversation under way keeps its own.",
    "model": "Changing these reloads the model in the background; "
    "the conversation stays and continues on the new model.",
    "ui": "",
    "tools": "Bounds of a turn in which the model calls tools; used from the next turn on.",
}


def section_order() -> list[str]:
    return [s for s in SECTION_ORDER if s in SECTIONS] + [
        s for s in SECTIONS if s not in SECTION_ORDER
    ]


@dataclass
class SettingsResult:
    settings: Settings
    """The whole settings, as the pane left them."""
    save: bool
    """Save (apply and write the config file) rather than Apply (this session only)."""


class SettingsScreen(Dialog[SettingsResult | None]):
    # The first field, not the first button ("Reset to defaults"): one focus
    # change on opening, and each one restyles the whole form.
    AUTO_FOCUS = "SettingField .setting-control"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
    ]

    def __init__(
        self,
        settings: Settings,
        *,
        choices: Mapping[str, Sequence[tuple[str, object]]] | None = None,
        notes: Mapping[str, str] | None = None,
        config_path: Path | None = None,
    ) -> None:
        """`choices`: options for settings shown as a list (model file, theme);
        `notes`: a line added to a field's help (e.g. where its value came from);
        `config_path`: where Save writes, None when it does not write."""
        super().__init__()
        self._settings = copy.deepcopy(settings)
        self._choices = dict(choices or {})
        self._notes = dict(notes or {})
        self._config_path = config_path
        self._fields: dict[str, SettingField] = {}

    def _intro(self) -> str:
        where = (
            f"Save applies and writes to {self._config_path}"
            if self._config_path is not None
            else "Save applies the settings (this session has no config file to write)"
        )
        return (
            f"{where}; Apply is for this session only. Values given by a command-line flag "
            "or a KVCHAT_* variable apply to this run and are saved only if you change them."
        )

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-dialog"):
            yield Static("Settings", id="settings-title")
            yield Static(Content(self._intro()), id="settings-intro")
            with VerticalScroll(id="settings-form"):
                for section in section_order():
                    with Horizontal(classes="settings-section", id=f"section-{section}"):
                        title = SECTION_TITLES.get(section, section.title())
                        yield Static(Content(title), classes="section-title")
                        yield Button(
                            "Reset to defaults",
                            id=f"reset-{section}",
                            classes="reset",
                            compact=True,
                        )
                    if SECTION_NOTES.get(section):
                        yield Static(Content(SECTION_NOTES[section]), classes="section-note")
                    for key, spec in FIELDS.items():
                        if spec.section == section:
                            field = SettingField(
                                spec,
                                get_value(self._settings, key),
                                choices=self._choices.get(key),
                                note=self._notes.get(key),
                            )
                            self._fields[key] = field
                            yield field
            yield Static("", id="settings-summary")
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Apply", id="apply")
                yield Button("Cancel", id="cancel")

    # -- the fields ------------------------------------------------------------

    def field(self, key: str) -> SettingField:
        return self._fields[key]

    def invalid_fields(self) -> list[SettingField]:
        return [item for item in self._fields.values() if not item.valid]

    @on(SettingField.Changed)
    def _field_changed(self, event: SettingField.Changed) -> None:
        self._update_buttons()

    def _update_buttons(self) -> None:
        invalid = self.invalid_fields()
        for button in self.query("#save, #apply").results(Button):
            button.disabled = bool(invalid)
        summary = self.query_one("#settings-summary", Static)
        if invalid:
            names = ", ".join(item.spec.key for item in invalid)
            summary.update(Content(f"Fix before saving: {names}"))
        else:
            summary.update("")
        summary.set_class(bool(invalid), "invalid")

    @on(Button.Pressed, ".reset")
    def _reset_section(self, event: Button.Pressed) -> None:
        section = (event.button.id or "").removeprefix("reset-")
        for item in self._fields.values():
            if item.spec.section == section:
                item.set_value(copy.deepcopy(item.spec.default))
        self._update_buttons()

    # -- closing ---------------------------------------------------------------

    def result(self) -> Settings | None:
        """The settings as the form holds them, or None while a field is invalid."""
        if self.invalid_fields():
            return None
        settings = copy.deepcopy(self._settings)
        for item in self._fields.values():
            set_value(settings, item.spec.key, copy.deepcopy(item.value))
        return settings

    def _close(self, save: bool) -> None:
        settings = self.result()
        if settings is None:
            self.notify("Some settings are not valid; fix them first.", severity="warning")
            return
        self.dismiss(SettingsResult(settings, save=save))

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        self._close(save=True)

    @on(Button.Pressed, "#apply")
    def _apply(self) -> None:
        self._close(save=False)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
