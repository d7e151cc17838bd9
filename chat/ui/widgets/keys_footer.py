"""The chat screen's footer: at 120 columns and more, Textual's footer as it is
(every key fits; a key that does nothing now is dimmed, so that a reply's
start and end change no key's place: chat.ui.screens.chat's check_action);
narrower, it leads with the keys a newcomer looks for first,
help (F1, which lists every other key), settings, models, then stop, new,
open and quit, with the command palette at the right end."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from chat.ui.widgets.sized_by_layout import SizedByTheLayout

WIDE = 120
"""Terminal width from which Textual's own order is kept."""
FIRST_KEYS = ("f1", "f2", "f8")
"""Help, settings, models: shown first, even where the binding is not in the footer."""
NARROW_REST = ("escape", "ctrl+n", "ctrl+o", "ctrl+q")
"""Then only these (stop, new, open, quit), so that the line fits 80 columns; F1 lists the rest."""
DIMMED_FROM = 80
"""Narrower than this, a key that does nothing now (Esc while nothing
streams) is left out rather than dimmed: the line is short of room there."""


@dataclass(frozen=True)
class KeySpec:
    """One key the footer draws, as a FooterKey is made from it."""

    key: str
    key_display: str
    description: str
    action: str
    enabled: bool
    tooltip: str
    palette: bool = False
    """The command palette's key, drawn at the right end."""

    @property
    def drawn_as(self) -> KeySpec:
        """The key whatever its state: enabled or not, one widget draws it,
        dimmed while disabled (`Key.show_enabled`)."""
        return replace(self, enabled=True)

    def widget(self) -> FooterKey:
        key = Key(
            self.key,
            self.key_display,
            self.description,
            self.action,
            disabled=not self.enabled,
            tooltip=self.tooltip,
            classes="-command-palette" if self.palette else "",
        )
        return key if self.palette else key.data_bind(compact=Footer.compact)


DIMMED = Style(dim=True)
"""A key whose action does nothing now: drawn as Textual's `-disabled` class draws it."""


class Key(SizedByTheLayout, FooterKey):
    """A key in the footer; its width changes when keys come and go (the
    branch key) without a second layout of the screen."""

    def __init__(
        self,
        key: str,
        key_display: str,
        description: str,
        action: str,
        disabled: bool = False,
        tooltip: str = "",
        classes: str = "",
    ) -> None:
        # Dimmed as it is drawn (`render`), not by Textual's `-disabled` class.
        super().__init__(
            key, key_display, description, action, disabled=False, tooltip=tooltip, classes=classes
        )
        self._disabled = disabled

    @property
    def dimmed(self) -> bool:
        """Drawn dimmed: its action does nothing now."""
        return self._disabled

    def show_enabled(self, enabled: bool) -> None:
        """Drawn dimmed while its action does nothing, as Textual's footer
        draws a disabled key (a click then rings the bell): its place and
        width stay, so only this key is drawn again. Not through the
        `-disabled` class that Textual's footer sets: a class restyles the
        key (its CSS matched again), twice a reply for each key that a
        reply's start and end dim or light, most of the 3-6 ms the footer
        took of a reply's UI thread (docs/performance.md, "The footer dims
        its keys as it draws them")."""
        disabled = not enabled
        if self._disabled != disabled:
            self._disabled = disabled
            self.refresh()

    def render(self) -> Text:
        text = super().render()
        if self._disabled:
            # What the class's `text-style: dim` gives: every cell dimmed.
            text.stylize(DIMMED)
        return text


class KeysFooter(SizedByTheLayout, Footer):
    def __init__(self) -> None:
        super().__init__()
        self._narrow: bool | None = None
        self._composed: list[tuple[KeySpec, FooterKey]] = []
        """The keys composed last, in order, each with its widget (hidden
        while the key is not active)."""

    def bindings_changed(self, screen: Screen[object]) -> None:
        # The screen says its bindings may have changed several times a turn
        # (a reply starts, ends, a key is typed); Textual's footer composes its
        # keys anew each time, which costs the UI thread more than a frame of
        # streamed text (some 25 ms, as a reply starts and again as it ends:
        # Esc appears, Regen and Edit go). The footer keeps the widgets of
        # keys that go, hidden, and shows them again when they come back; it
        # composes only when a key it never drew comes, or one changes.
        self._bindings_ready = True
        if not (screen.app.app_focus and self.is_attached and screen is self.screen):
            return
        if self._narrow != (self.app.size.width < WIDE) or not self._show_only(self._key_specs()):
            self.call_after_refresh(self.recompose)

    def _show_only(self, specs: list[KeySpec]) -> bool:
        """Show the composed keys that are `specs` (each enabled or dimmed as
        its spec says) and hide the others, when `specs` are all among them
        in the same order; else False."""
        placed: list[KeySpec | None] = []
        wanted = iter(specs)
        want = next(wanted, None)
        for spec, _ in self._composed:
            if want is not None and spec.drawn_as == want.drawn_as:
                placed.append(want)
                want = next(wanted, None)
            else:
                placed.append(None)
        if want is not None or not self._composed:
            return False
        composed: list[tuple[KeySpec, FooterKey]] = []
        for (old, key), new in zip(self._composed, placed, strict=True):
            key.display = new is not None
            if new is not None and isinstance(key, Key):
                key.show_enabled(new.enabled)
            composed.append((new or old, key))
        self._composed = composed
        self._set_columns(specs)
        return True

    def _set_columns(self, specs: list[KeySpec]) -> None:
        """One grid column for each key drawn, the palette's aside."""
        self.styles.grid_size_columns = sum(not spec.palette for spec in specs)

    def _key_specs(self) -> list[KeySpec]:
        """The keys to draw now: Textual's footer's at 120 columns and more
        (each action once, with its first key; kvchat's keys have no groups,
        which Textual's footer would draw as one), else the narrow selection."""
        active = self.screen.active_bindings
        if self.app.size.width < WIDE:
            first = [active[key] for key in FIRST_KEYS if key in active]
            first_actions = {binding.action for _, binding, _, _ in first}
            dimmed = self.app.size.width >= DIMMED_FROM
            rest = [
                active[key]
                for key in NARROW_REST
                if key in active
                and active[key][1].show
                and active[key][1].action not in first_actions
                and (dimmed or active[key][2])
            ]
            chosen = [*first, *rest]
        else:
            chosen = [each for each in active.values() if each[1].show]
        seen: set[str] = set()
        specs: list[KeySpec] = []
        for _, binding, enabled, tooltip in chosen:
            if binding.action not in seen:
                seen.add(binding.action)
                specs.append(self._spec(binding, enabled, tooltip))
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette:
            _, binding, enabled, _ = palette
            tooltip = binding.tooltip or binding.description
            specs.append(self._spec(binding, enabled, tooltip, palette=True))
        return specs

    def _spec(
        self, binding: Binding, enabled: bool, tooltip: str, palette: bool = False
    ) -> KeySpec:
        return KeySpec(
            binding.key,
            self.app.get_key_display(binding),
            binding.description,
            binding.action,
            enabled,
            tooltip,
            palette,
        )

    def on_resize(self, event: events.Resize) -> None:
        narrow = self.app.size.width < WIDE
        if self._narrow is not None and narrow != self._narrow:
            self.call_after_refresh(self.recompose)
        self._narrow = narrow

    def compose(self) -> ComposeResult:
        narrow = self.app.size.width < WIDE
        kept = [spec for spec, _ in self._composed] if narrow == self._narrow else []
        self._narrow = narrow
        self._composed = []
        if not self._bindings_ready:
            return
        specs = self._key_specs()
        self._set_columns(specs)
        for spec in _merged(kept, specs):
            key = spec.widget()
            key.display = spec in specs
            self._composed.append((spec, key))
            yield key


def _merged(drawn: list[KeySpec], specs: list[KeySpec]) -> list[KeySpec]:
    """`specs`, with each key drawn before that is not among them put back
    after the key it followed (hidden): a key that comes and goes (the
    branch key, once a message has alternatives) is then a matter of
    showing and hiding. Keys are matched by key: each is drawn once."""
    merged = list(specs)
    keys = {spec.key for spec in specs}
    for index, spec in enumerate(drawn):
        if spec.key in keys:
            continue
        before = drawn[index - 1].key if index else None
        place = next((at + 1 for at, each in enumerate(merged) if each.key == before), 0)
        merged.insert(place, spec)
        keys.add(spec.key)
    return merged
