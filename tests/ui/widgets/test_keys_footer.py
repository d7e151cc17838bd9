"""The footer shows the keys that do something now. As a reply starts and
ends, keys come and go (Esc to stop; Regen and Edit once it is over): the
footer hides and shows the keys it drew, composing them again only for a key
it never drew."""

from __future__ import annotations

import pytest
from textual.widgets._footer import FooterKey

from chat.ui.widgets.keys_footer import KeysFooter
from tests.conftest import turn_done, wait_for
from tests.fakes import ScriptedEngine
from tests.ui.conftest import make_app, ready, send


def drawn_keys(footer: KeysFooter) -> list[str]:
    """The keys on screen, left to right."""
    keys = [key for key in footer.query(FooterKey) if key.display]
    return [key.key for key in sorted(keys, key=lambda key: key.region.x)]


@pytest.mark.parametrize("width", [130, 100])
async def test_keys_come_and_go_with_a_reply_without_composing_again(
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
    engine = ScriptedEngine(replies=[words, words, words], delay=0.01)
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

        for turn in range(1, 4):
            await send(pilot, f"message {turn}")
            await wait_for(lambda: screen.generating, pilot)
            during = await settled()
            assert during == expected()
            assert "escape" in during
            assert "ctrl+r" not in during  # Regen: not while a reply streams
            if turn == 2:
                composed_before = composed
            await turn_done(screen, pilot, 2 * turn)
            after = await settled()
            assert after == expected()
            assert "escape" not in after
            assert (width >= 120) == ("ctrl+r" in after)  # narrower, F1 lists it
        # From the second reply on, no key was new: nothing was composed again.
        assert composed == composed_before
