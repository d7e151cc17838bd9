"""Themes in the running app: which are offered, which one starts, switching
live from the command palette, saving the choice, and the stylesheets' colours."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from textual._color_constants import COLOR_NAME_TO_RGB
from textual.color import Color
from textual.command import CommandPalette
from textual.widgets import OptionList

import chat
from chat import paths
from chat.errors import KvchatError
from chat.settings.config_file import backup_path, load_config
from chat.settings.schema import Settings
from chat.ui.app import ChatApp, Launch
from chat.ui.themes import APP_VARIABLES, DEFAULT_THEME, load_themes
from chat.ui.widgets.message_view import UserMessageView
from tests.conftest import good_document, wait_for, write
from tests.fakes import ScriptedEngine, scripted_factory
from tests.ui.conftest import MODEL, ready, run_command, send

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


def builtin_names() -> list[str]:
    themes, problems = load_themes(Path("/nonexistent/kvchat-user-themes"))
    assert problems == []
    return [theme.name for theme in themes]


# Each test waits for the (scripted) model before it ends: an app that exits
# while the model loads is another test's subject (test_chat_screen).


def make_app(settings: Settings | None = None, config_path: Path | None = None) -> ChatApp:
    return ChatApp(
        Launch(settings or Settings(), MODEL, config_path=config_path),
        engine_factory=scripted_factory(ScriptedEngine()),
    )


def notices(app: ChatApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app.notices]


def saved_theme(config_path: Path) -> str:
    return str(tomllib.loads(config_path.read_text())["ui"]["theme"])


# --- which themes, which one at start ------------------------------------------


async def test_only_kvchat_themes_are_registered_default_first() -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await ready(app, pilot)
        assert list(app.available_themes) == builtin_names()
        assert "textual-dark" not in app.available_themes
        assert app.theme == DEFAULT_THEME == builtin_names()[0]


async def test_starts_on_the_configured_theme_without_saving_it(tmp_path: Path) -> None:
    settings = Settings()
    settings.ui.theme = "kvchat-light"  # as from --theme, KVCHAT_THEME or the config
    config_path = tmp_path / "config.toml"
    app = make_app(settings, config_path)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        assert app.theme == "kvchat-light"
        assert not app.current_theme.dark
        assert notices(app) == []
    assert not config_path.exists()


async def test_unknown_theme_falls_back_with_a_notice(tmp_path: Path) -> None:
    settings = Settings()
    settings.ui.theme = "dracula"
    config_path = tmp_path / "config.toml"
    app = make_app(settings, config_path)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await wait_for(lambda: app.notices, pilot)
        assert app.theme == DEFAULT_THEME
        (text,) = notices(app)
        assert "There is no theme called 'dracula'" in text
        assert "kvchat-light" in text and f"Using {DEFAULT_THEME}." in text
    assert not config_path.exists()


async def test_user_themes_are_offered_after_the_builtins() -> None:
    write(paths.user_themes_dir(), "mine.toml", good_document("mine"))
    settings = Settings()
    settings.ui.theme = "mine"
    app = make_app(settings)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        assert list(app.available_themes) == [*builtin_names(), "mine"]
        assert app.theme == "mine"
        assert app.theme_variables["background"] == Color.parse("#101010").hex


async def test_bad_user_theme_file_is_reported_in_the_app() -> None:
    bad = good_document("bad")
    bad["variables"] = "x"  # the message quotes "[variables]": shown as text, not markup
    bad_file = write(paths.user_themes_dir(), "bad.toml", bad)
    worse = good_document("worse")
    for field in ("primary", "secondary", "accent", "panel", "error"):
        del worse[field]
    worse_file = write(paths.user_themes_dir(), "worse.toml", worse)
    app = make_app()
    async with app.run_test() as pilot:
        await ready(app, pilot)
        await wait_for(lambda: len(app.notices) == 2, pilot)
        first, second = notices(app)
        assert first == (
            f"Theme file skipped: {bad_file}:\n"
            "field 'variables': must be a [variables] table, not a string."
        )
        assert second.startswith(f"Theme file skipped: {worse_file}:\nfield 'primary': ")
        assert second.endswith("… and 2 more (`chat --list-themes` lists them).")
        assert "bad" not in app.available_themes
        assert app.theme == DEFAULT_THEME


def test_css_defaults_are_kvchat_darks_variables() -> None:
    dark = {theme.name: theme for theme in load_themes()[0]}[DEFAULT_THEME]
    defaults = make_app().get_theme_variable_defaults()
    assert defaults == {name: dark.variables[name] for name in APP_VARIABLES}


# --- switching -------------------------------------------------------------------


async def open_theme_picker(pilot) -> OptionList:  # type: ignore[no-untyped-def]
    """Ctrl+P, "theme", Enter: the palette that lists the themes, every one listed."""
    await run_command(pilot, "theme", "Theme")
    await wait_for(lambda: isinstance(pilot.app.screen, CommandPalette), pilot)
    options = pilot.app.screen.query_one(OptionList)
    await wait_for(lambda: options.option_count >= len(builtin_names()), pilot)
    return options


async def test_command_palette_lists_our_themes_and_switching_saves(tmp_path: Path) -> None:
    config_path = tmp_path / "config.toml"
    settings = Settings()
    settings.sampling.temperature = 0.1  # from a CLI flag, say: must not be saved
    app = make_app(settings, config_path)
    async with app.run_test() as pilot:
        screen = await ready(app, pilot)
        await send(pilot, "hello")
        await wait_for(lambda: len(screen.conversation.messages) == 2, pilot)
        message = app.query_one(".message.user", UserMessageView)
        options = await open_theme_picker(pilot)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(len(options.options))]
        names = [prompt.splitlines()[0] for prompt in prompts]
        assert names == builtin_names()
        assert "dark · Default dark theme" in prompts[0] and "in use" in prompts[0]
        assert "light · " in prompts[names.index("kvchat-light")]

        await pilot.press(*"kvchat-light", "enter")
        await wait_for(lambda: app.theme == "kvchat-light", pilot)
        await pilot.pause()
        light = app.get_theme("kvchat-light")
        assert light is not None
        # Applied live: the message already on screen has the new colours.
        assert message.styles.background == Color.parse(light.variables["user-message-background"])
        assert saved_theme(config_path) == "kvchat-light"
        assert load_config(config_path) == (_only_theme("kvchat-light"), [])
        assert app.settings.ui.theme == "kvchat-light"


def _only_theme(name: str) -> Settings:
    settings = Settings()
    settings.ui.theme = name
    return settings


async def test_set_theme_applies_and_saves(tmp_path: Path) -> None:
    config_path = tmp_path / "config.toml"
    config_path.write_text('[sampling]\ntemperature = 0.5\n\n[ui]\ntheme = "kvchat-nord"\n')
    settings, _ = load_config(config_path)
    app = make_app(settings, config_path)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        assert app.theme == "kvchat-nord"
        app.set_theme("kvchat-sand")
        await pilot.pause()
        assert app.theme == "kvchat-sand"
        saved, problems = load_config(config_path)
        assert problems == []
        assert saved.ui.theme == "kvchat-sand"
        assert saved.sampling.temperature == 0.5  # the rest of the file is kept
        with pytest.raises(KvchatError, match="There is no theme called 'nope'"):
            app.set_theme("nope")
        assert app.theme == "kvchat-sand"


async def test_without_a_config_path_nothing_is_saved() -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await ready(app, pilot)
        app.set_theme("kvchat-light")
        await pilot.pause()
        assert app.theme == "kvchat-light"
        assert app.settings.ui.theme == "kvchat-light"
    assert not paths.config_dir().exists()


async def test_config_with_problems_is_backed_up_once(tmp_path: Path) -> None:
    config_path = tmp_path / "config.toml"
    original = "[sampling]\ntemperature = 0.5\ntemprature = 2\n"
    config_path.write_text(original)
    settings, problems = load_config(config_path)
    assert problems
    app = make_app(settings, config_path)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        app.set_theme("kvchat-light")
        await pilot.pause()
        backup = backup_path(config_path)
        assert backup.read_text() == original
        assert any(str(backup) in text for text in notices(app))
        assert load_config(config_path)[0].sampling.temperature == 0.5
        # The rewritten file is clean: a second switch keeps the user's version.
        app.set_theme("kvchat-nord")
        await pilot.pause()
        assert backup.read_text() == original
        assert saved_theme(config_path) == "kvchat-nord"


async def test_failed_save_is_reported(tmp_path: Path) -> None:
    config_path = tmp_path / "config.toml"
    config_path.mkdir()  # cannot be read or replaced
    app = make_app(config_path=config_path)
    async with app.run_test() as pilot:
        await ready(app, pilot)
        app.set_theme("kvchat-light")
        await wait_for(lambda: app.notices, pilot)
        assert app.theme == "kvchat-light"  # still applied for this run
        (text,) = notices(app)
        assert text.startswith(f"Theme not saved: Cannot save the settings to {config_path}")


# --- stylesheets use theme variables only -----------------------------------------

COLOUR_NAMES = set(COLOR_NAME_TO_RGB)  # "red", "ansi_red", ... as Textual knows them
# "transparent" is no colour of its own: it lets the theme's colour behind show.
ALLOWED_WORDS = {"transparent"}
DECLARATION = re.compile(r"([\w-]+)\s*:\s*([^;{}]+)[;}]")
COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


def literal_colours(css: str) -> list[str]:
    """Declarations in `css` whose value names a colour instead of a `$variable`."""
    found = []
    for match in DECLARATION.finditer(COMMENT.sub("", css)):
        value = match.group(2)
        words = set(re.findall(r"[A-Za-z_][\w-]*", re.sub(r"\$[\w-]+", "", value)))
        if (
            re.search(r"#[0-9a-fA-F]{3,8}\b", value)
            or re.search(r"\b(rgb|rgba|hsl|hsla)\(", value)
            or (words & COLOUR_NAMES) - ALLOWED_WORDS
        ):
            found.append(match.group(0).strip())
    return found


def test_literal_colour_check_finds_each_kind() -> None:
    css = """
    /* #ffffff in a comment is fine */
    #conversation:focus { color: $foreground; border: round $primary; }
    A { background: #1e1e1e; }
    B { color: rgb(1, 2, 3); }
    C { border: thick red; }
    D { background: transparent; color: $text 80%; }
    E { color: ansi_bright_green }
    """
    assert literal_colours(css) == [
        "background: #1e1e1e;",
        "color: rgb(1, 2, 3);",
        "border: thick red;",
        "color: ansi_bright_green }",
    ]


def test_stylesheets_use_theme_variables_only() -> None:
    package = Path(chat.__file__).parent
    stylesheets = sorted(package.rglob("*.tcss"))
    assert package / "ui" / "app.tcss" in stylesheets
    for stylesheet in stylesheets:
        assert literal_colours(stylesheet.read_text(encoding="utf-8")) == [], stylesheet
