"""The chat screen's footer: at 120 columns and more, Textual's footer as it is
(every key fits); narrower, it leads with the keys a newcomer looks for first,
help (F1, which lists every other key), settings, models, then stop, new,
open and quit, with the command palette at the right end."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

WIDE = 120
"""Terminal width from which Textual's own order is kept."""
FIRST_KEYS = ("f1", "f2", "f8")
"""Help, settings, models: shown first, even where the binding is not in the footer."""
NARROW_REST = ("escape", "ctrl+n", "ctrl+o", "ctrl+q")
"""Then only these (stop, new, open, quit), so that the line fits 80 columns; F1 lists the rest."""


class KeysFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._narrow: bool | None = None
        self._shown: tuple[object, ...] | None = None
        """What the keys composed last showed (`_keys_shown`)."""

    def bindings_changed(self, screen: Screen[object]) -> None:
        # The screen says its bindings may have changed several times a turn
        # (a reply starts, ends, a key is typed); Textual's footer composes its
        # keys anew each time, which costs the UI thread more than a frame of
        # streamed text. Only a change the footer shows is composed.
        unchanged = (
            self._shown is not None
            and self.is_attached
            and screen is self.screen
            and self._keys_shown() == self._shown
        )
        if not unchanged:
            super().bindings_changed(screen)

    def _keys_shown(self) -> tuple[object, ...]:
        """The active bindings that the footer may draw, with what it draws of
        them, and the width's form (a binding kept out of the footer may turn
        on and off at every reply: that is no change here)."""
        palette = self.app.COMMAND_PALETTE_BINDING
        return (
            self.app.size.width < WIDE,
            tuple(
                (key, binding.action, binding.description, enabled, tooltip)
                for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
                if binding.show or key in FIRST_KEYS or key == palette
            ),
        )

    def on_resize(self, event: events.Resize) -> None:
        narrow = self.app.size.width < WIDE
        if self._narrow is not None and narrow != self._narrow:
            self.call_after_refresh(self.recompose)
        self._narrow = narrow

    def compose(self) -> ComposeResult:
        self._narrow = self.app.size.width < WIDE
        if self._bindings_ready:
            self._shown = self._keys_shown()
        if not self._narrow:
            yield from super().compose()
            return
        if not self._bindings_ready:
            return
        active = self.screen.active_bindings
        first = [active[key] for key in FIRST_KEYS if key in active]
        first_actions = {binding.action for _, binding, _, _ in first}
        rest = [
            active[key]
            for key in NARROW_REST
            if key in active and active[key][1].show and active[key][1].action not in first_actions
        ]
        seen: set[str] = set()
        keys: list[tuple[Binding, bool, str]] = []
        for _, binding, enabled, tooltip in [*first, *rest]:
            if binding.action not in seen:
                seen.add(binding.action)
                keys.append((binding, enabled, tooltip))
        self.styles.grid_size_columns = len(keys)
        for binding, enabled, tooltip in keys:
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            ).data_bind(compact=Footer.compact)
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette:
            _, binding, enabled, tooltip = palette
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                classes="-command-palette",
                disabled=not enabled,
                tooltip=binding.tooltip or binding.description,
            )
