"""The footer's keys, and what a reply's start and end change in it: the
keys stay where they are, the ones that do nothing now dimmed (Esc to stop
while nothing streams; Regen and Edit while a reply does), so that no key
moves and nothing is composed again."""

from __future__ import annotations

import pytest
from rich.style import Style
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.widgets._footer import FooterKey

from chat.ui.widgets.keys_footer import Key, KeysFooter
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send


def drawn_keys(footer: KeysFooter) -> list[str]:
    """The keys on screen, left to right."""
    keys = [key for key in footer.query(FooterKey) if key.display]
    return [key.key for key in sorted(keys, key=lambda key: key.region.x)]


def dimmed_keys(footer: KeysFooter) -> set[str]:
    """The keys on screen drawn dimmed (their action does nothing now)."""
    return {key.key for key in footer.query(Key) if key.display and key.dimmed}


def drawn(key: FooterKey) -> list[tuple[str, Style | None]]:
    """The key's cells as drawn: each piece's text and style (without the
    offsets Textual marks cells with for selecting)."""
    return [
        (segment.text, segment.style and segment.style.clear_meta_and_links())
        for strip in key.render_lines(key.size.region)
        for segment in strip
    ]


async def test_a_dimmed_key_draws_as_textuals_disabled_key() -> None:
    """Dimmed as it is drawn, not by Textual's `-disabled` class (which
    restyles the key at each change): the cells are the same as those of
    Textual's own footer key, disabled or not, after any number of changes."""

    class Keys(App[None]):
        def compose(self) -> ComposeResult:
            with Horizontal():
                for disabled in (True, False):
                    yield FooterKey("escape", "esc", "Stop", "stop", disabled=disabled)
                    yield Key("escape", "esc", "Stop", "stop", disabled=disabled)
                yield Key("ctrl+r", "^r", "Regen", "regenerate", disabled=False)

    async with Keys().run_test(size=(60, 3)) as pilot:
        textual_dimmed, dimmed, textual_lit, lit, toggled = pilot.app.query(FooterKey)
        assert isinstance(dimmed, Key) and isinstance(lit, Key) and isinstance(toggled, Key)
        assert drawn(dimmed) == drawn(textual_dimmed) != drawn(textual_lit) == drawn(lit)
        assert not dimmed.has_class("-disabled")
        for enabled in (False, True, False):
            toggled.show_enabled(enabled)
            await pilot.pause()
            shown = drawn(toggled)
            dimmed.show_enabled(enabled)
            lit.show_enabled(enabled)
            await pilot.pause()
            expected = drawn(textual_lit if enabled else textual_dimmed)
            assert drawn(dimmed) == drawn(lit) == expected
            assert [text for text, _ in shown] == ["^r", " Regen"]
            assert toggled.dimmed is not enabled


@pytest.mark.parametrize("width", [130, 100])
async def test_a_reply_dims_keys_and_moves_none(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    composed = 0
    compose = KeysFooter.compose

    def counting(self: KeysFooter):  # type: ignore[no-untyped-def]
        nonlocal composed
        composed += 1
        return compose(self)

    monkeypatch.setattr(KeysFooter, "compose", counting)
    words = [f"word{n} " for n in range(60)]
    # Each reply stalls after its first token until the keys it shows are
    # checked, so they are checked while it streams however slow the machine.
    engine = ScriptedEngine(replies=[words, words, words], delay=0.01, hold_after=1)
    app = make_app(engine)
    async with app.run_test(size=(width, 40)) as pilot:
        screen = await ready(app, pilot)
        footer = screen.query_one(KeysFooter)

        async def settled() -> list[str]:
            await pilot.pause()
            await pilot.pause()
            return drawn_keys(footer)

        def expected() -> list[str]:
            return [spec.key for spec in footer._key_specs()]

        before = await settled()
        assert "escape" in before and "escape" in dimmed_keys(footer)  # nothing to stop
        composed_before = composed
        places = {key.key: key.region for key in footer.query(FooterKey) if key.display}
        for turn in range(1, 4):
            await send(pilot, f"message {turn}")
            await wait_for(engine.holding.is_set, pilot)
            during = await settled()
            assert during == expected() == before
            assert "escape" not in dimmed_keys(footer)
            if width >= 120:  # narrower, F1 lists Regen
                assert "ctrl+r" in during and "ctrl+r" in dimmed_keys(footer)
            engine.release.set()
            await turn_done(screen, pilot, 2 * turn)
            after = await settled()
            assert after == expected() == before
            assert "escape" in dimmed_keys(footer)
            assert "ctrl+r" not in dimmed_keys(footer)
            # No key moved: each is where it was before the first message.
            assert {k.key: k.region for k in footer.query(FooterKey) if k.display} == places
        assert composed == composed_before  # nothing composed again


@pytest.mark.parametrize("size", [(20, 5), (24, 6), (30, 8)])
async def test_in_a_narrow_terminal_nothing_shows_after_the_palette_key(
    size: tuple[int, int],
) -> None:
    # The palette key's blank end was a margin, showing the end of a key that
    # did not fit under it ("f1 Hel▏^p paletteg" at 20 columns).
    app = make_app(ScriptedEngine())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.pause()
        footer = app.screen.query_one(KeysFooter)
        row = app.screen._compositor.render_strips()[footer.region.y]
        drawn_row = row.crop(footer.region.x, footer.region.right).text
        assert drawn_row.endswith("^p palette ")
