"""Built-in themes, the theme loader, and the themes' place in the wheel."""

from __future__ import annotations

import importlib.util
import itertools
import math
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.color import Color
from textual.widgets import Static

import chat
from chat import paths
from chat.errors import KvchatError
from chat.settings.user_files import FileProblem, UserFileError
from chat.ui.themes import (
    APP_VARIABLES,
    DEFAULT_THEME,
    REQUIRED_FIELDS,
    KvchatTheme,
    builtin_themes_dir,
    contrast_ratio,
    example_theme_toml,
    load_theme_file,
    load_themes,
)
from tests.conftest import good_document, write

REPO = Path(__file__).resolve().parents[3]
DIMMED_METER_VARIABLES = ("meter-tools", "meter-thinking")
"""Drawn dimmed: told apart from the segment whose colour they take by default
(earlier conversation, the reply) by that."""
METER_VARIABLES = tuple(
    name
    for name in APP_VARIABLES
    if name.startswith("meter-") and name not in DIMMED_METER_VARIABLES
)


def builtin_themes() -> list[KvchatTheme]:
    themes, problems = load_themes(Path("/nonexistent/kvchat-user-themes"))
    assert problems == []
    return themes


def example_theme(tmp_path: Path) -> KvchatTheme:
    file = tmp_path / "example.toml"
    file.write_text(example_theme_toml(), encoding="utf-8")
    return load_theme_file(file, require_all_variables=True)


# --- the built-in themes ----------------------------------------------------


def test_builtin_themes_load_with_every_variable() -> None:
    themes = builtin_themes()
    assert len(themes) >= 5
    for theme in themes:
        assert theme.builtin
        assert theme.path is not None and theme.path.stem == theme.name
        assert set(APP_VARIABLES) <= set(theme.variables), theme.name
        assert theme.description and "\n" not in theme.description
    names = [theme.name for theme in themes]
    assert len(names) == len(set(names))


def test_builtin_files_set_every_field_themselves() -> None:
    # `require_all_variables` is what keeps built-ins complete; check the
    # files too, so that no built-in leans on another one's fallback.
    for file in sorted(builtin_themes_dir().glob("*.toml")):
        text = file.read_text(encoding="utf-8")
        for key in (*REQUIRED_FIELDS, "description", *APP_VARIABLES):
            assert f"\n{key} = " in text, f"{file.name} does not set {key}"


def test_builtin_set_has_light_dark_and_high_contrast() -> None:
    themes = {theme.name: theme for theme in builtin_themes()}
    assert next(iter(themes)) == DEFAULT_THEME
    assert themes[DEFAULT_THEME].dark
    assert not themes["kvchat-light"].dark
    assert any(theme.dark for theme in themes.values())
    assert any(not theme.dark for theme in themes.values())
    assert themes["high-contrast"].dark


def text_pairs(theme: KvchatTheme) -> dict[str, tuple[str, str]]:
    """Every text colour on the background it is drawn on."""
    v = theme.variables
    assert theme.foreground and theme.background and theme.surface and theme.panel
    return {
        "foreground on background": (theme.foreground, theme.background),
        "foreground on surface": (theme.foreground, theme.surface),
        "foreground on panel": (theme.foreground, theme.panel),
        "user message": (v["user-message-foreground"], v["user-message-background"]),
        "assistant message": (
            v["assistant-message-foreground"],
            v["assistant-message-background"],
        ),
        "code": (v["code-foreground"], v["code-background"]),
        "message-meta on background": (v["message-meta"], theme.background),
        "message-meta on user message": (v["message-meta"], v["user-message-background"]),
        "message-meta on assistant message": (
            v["message-meta"],
            v["assistant-message-background"],
        ),
        "foreground on error panel": (theme.foreground, v["error-panel-background"]),
    }


def check_contrast(theme: KvchatTheme) -> None:
    # WCAG AA for body text; the high-contrast theme promises AAA everywhere.
    minimum = 7.0 if theme.name == "high-contrast" else 4.5
    for what, (fg, bg) in text_pairs(theme).items():
        ratio = contrast_ratio(fg, bg)
        assert ratio >= minimum, f"{theme.name}: {what} {fg} on {bg} is {ratio:.2f}:1"
    # Dimmed on purpose, but still legible: WCAG's 3:1 for large text.
    v = theme.variables
    assert theme.background is not None
    for background in (
        theme.background,
        v["user-message-background"],
        v["assistant-message-background"],
    ):
        ratio = contrast_ratio(v["outside-window"], background)
        assert ratio >= 3.0, f"{theme.name}: outside-window on {background} is {ratio:.2f}:1"
    for field in ("primary", "warning", "error", "success", "accent"):
        colour = getattr(theme, field)
        ratio = contrast_ratio(colour, theme.background)
        assert ratio >= 3.0, f"{theme.name}: {field} {colour} on background is {ratio:.2f}:1"


@pytest.mark.parametrize("theme", builtin_themes(), ids=lambda theme: theme.name)
def test_builtin_contrast(theme: KvchatTheme) -> None:
    check_contrast(theme)


def delta_e(first: str, second: str) -> float:
    """CIE76 colour difference: about 2.3 is just noticeable, 20+ is obvious."""

    def lab(text: str) -> tuple[float, float, float]:
        colour = Color.parse(text)

        def linear(channel: int) -> float:
            c = channel / 255
            return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b = linear(colour.r), linear(colour.g), linear(colour.b)
        x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
        y = 0.2126 * r + 0.7152 * g + 0.0722 * b
        z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

        def f(t: float) -> float:
            return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

        return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))

    return math.dist(lab(first), lab(second))


@pytest.mark.parametrize("theme", builtin_themes(), ids=lambda theme: theme.name)
def test_meter_segments_are_distinguishable(theme: KvchatTheme) -> None:
    for first, second in itertools.combinations(METER_VARIABLES, 2):
        a, b = theme.variables[first], theme.variables[second]
        assert delta_e(a, b) >= 20, f"{theme.name}: {first} {a} looks like {second} {b}"


def test_example_theme_is_complete_and_readable(tmp_path: Path) -> None:
    theme = example_theme(tmp_path)
    assert theme.name not in {builtin.name for builtin in builtin_themes()}
    for name in APP_VARIABLES:
        assert f"\n{name} = " in example_theme_toml()
    check_contrast(theme)


# --- contrast_ratio ---------------------------------------------------------


def test_contrast_ratio_matches_wcag() -> None:
    assert contrast_ratio("#ffffff", "#000000") == pytest.approx(21.0)
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast_ratio("#777777", "#777777") == pytest.approx(1.0)
    # Reference value from the WCAG contrast checker.
    assert contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)
    assert contrast_ratio("red", "white") == pytest.approx(4.0, abs=0.01)
    # Half-transparent white on black is mid grey, not white.
    assert contrast_ratio("#ffffff80", "#000000") == pytest.approx(
        contrast_ratio("#808080", "#000000"), abs=0.05
    )


# --- user themes and their mistakes -------------------------------------------


def test_user_theme_fills_app_variables_from_matching_builtin(tmp_path: Path) -> None:
    builtins = {theme.name: theme for theme in builtin_themes()}
    user_dir = tmp_path / "themes"
    document = good_document("night")
    document["variables"] = {"meter-free": "#123456", "footer-key-foreground": "#ffd400"}
    write(user_dir, "night.toml", document)
    write(user_dir, "day.toml", good_document("day", dark=False))

    themes, problems = load_themes(user_dir)
    assert problems == []
    by_name = {theme.name: theme for theme in themes}
    night, day = by_name["night"], by_name["day"]
    assert not night.builtin
    assert night.path == user_dir / "night.toml"
    assert night.variables["meter-free"] == "#123456"
    assert night.variables["footer-key-foreground"] == "#ffd400"
    dark_variables = builtins["kvchat-dark"].variables
    light_variables = builtins["kvchat-light"].variables
    assert night.variables["code-background"] == dark_variables["code-background"]
    assert day.variables["code-background"] == light_variables["code-background"]
    assert set(APP_VARIABLES) <= set(day.variables)
    assert day.description == ""


def test_default_user_dir_is_the_config_themes_folder() -> None:
    # conftest points KVCHAT_CONFIG_DIR at a temporary folder.
    write(paths.user_themes_dir(), "mine.toml", good_document("mine"))
    themes, problems = load_themes()
    assert problems == []
    assert themes[-1].name == "mine"


def test_missing_user_dir_is_fine(tmp_path: Path) -> None:
    themes, problems = load_themes(tmp_path / "no-such-folder")
    assert problems == []
    assert [theme.name for theme in themes] == [theme.name for theme in builtin_themes()]


def test_user_theme_overrides_builtin_in_place(tmp_path: Path) -> None:
    user_dir = tmp_path / "themes"
    document = good_document("kvchat-light", dark=False)
    document["primary"] = "#aa0000"
    write(user_dir, "my-light.toml", document)
    themes, problems = load_themes(user_dir)
    assert problems == []
    names = [theme.name for theme in themes]
    assert names == [theme.name for theme in builtin_themes()]
    replaced = themes[names.index("kvchat-light")]
    assert replaced.primary == "#aa0000" and not replaced.builtin


def test_second_user_file_with_same_name_is_reported(tmp_path: Path) -> None:
    user_dir = tmp_path / "themes"
    first = write(user_dir, "a.toml", good_document("twin"))
    second = write(user_dir, "b.toml", good_document("twin"))
    themes, problems = load_themes(user_dir)
    assert [theme.path for theme in themes if theme.name == "twin"] == [first]
    assert [(problem.path, problem.field) for problem in problems] == [(second, "name")]
    assert str(first) in problems[0].message


def with_changes(**changes: Any) -> dict[str, Any]:
    document = good_document("bad")
    for key, value in changes.items():
        if value is None:
            del document[key]
        else:
            document[key] = value
    return document


BAD_FILES: dict[str, tuple[dict[str, Any] | str, str | None, str]] = {
    "toml syntax": ('name = "bad"\ndark = true\nprimary = \n', None, "line 3"),
    "unknown field": (with_changes(primry="#ff0000"), "primry", "did you mean 'primary'?"),
    "missing field": (with_changes(panel=None), "panel", "is missing"),
    "invalid colour": (
        with_changes(primary="blurple"),
        "primary",
        "'blurple' is not a colour (use #rrggbb or a colour name).",
    ),
    "colour of wrong type": (with_changes(background=123), "background", "not a whole number"),
    "dark of wrong type": (with_changes(dark="yes"), "dark", "must be true or false"),
    "name of wrong type": (with_changes(name=["a"]), "name", "must be a string"),
    "name with a comma": (with_changes(name="a, b"), "name", "cannot be a theme name"),
    "multi-line description": (
        with_changes(description="one\ntwo"),
        "description",
        "must be one line",
    ),
    "unknown variable": (
        with_changes(variables={"meter-fre": "#000000"}),
        "variables.meter-fre",
        "did you mean 'meter-free'?",
    ),
    "invalid variable colour": (
        with_changes(variables={"code-background": "nope"}),
        "variables.code-background",
        "'nope' is not a colour",
    ),
    "variable of wrong type": (
        with_changes(variables={"meter-new": 5}),
        "variables.meter-new",
        "not a whole number",
    ),
    "variables not a table": (with_changes(variables="x"), "variables", "[variables] table"),
    "variable at top level": (
        with_changes(**{"meter-new": "#000000"}),
        "meter-new",
        "[variables] table",
    ),
    "theme field as variable": (
        with_changes(variables={"primary": "#000000"}),
        "variables.primary",
        "is a theme field",
    ),
    "bad textual style": (
        with_changes(variables={"block-cursor-text-style": "shiny"}),
        "variables.block-cursor-text-style",
        "is not a text style",
    ),
    "bad textual colour": (
        with_changes(variables={"footer-key-foreground": "$primary"}),
        "variables.footer-key-foreground",
        "is not a colour",
    ),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_bad_user_file_is_reported_and_skipped(tmp_path: Path, kind: str) -> None:
    document, field, fragment = BAD_FILES[kind]
    user_dir = tmp_path / "themes"
    bad = write(user_dir, "bad.toml", document)
    write(user_dir, "good.toml", good_document("good"))

    themes, problems = load_themes(user_dir)

    assert "good" in [theme.name for theme in themes]
    assert "bad" not in [theme.name for theme in themes]
    assert [(problem.path, problem.field) for problem in problems] == [(bad, field)]
    text = str(problems[0])
    assert text.startswith(f"{bad}: ")
    if field is not None:
        assert f"field '{field}': " in text
    assert fragment in text
    assert text.endswith((".", "?"))


def test_problem_text_names_file_and_field() -> None:
    problem = FileProblem(
        Path("/x/themes/mine.toml"),
        "primary",
        "'blurple' is not a colour (use #rrggbb or a colour name).",
    )
    assert str(problem) == (
        "/x/themes/mine.toml: field 'primary': "
        "'blurple' is not a colour (use #rrggbb or a colour name)."
    )
    assert str(FileProblem(Path("/x/a.toml"), None, "is not valid TOML.")) == (
        "/x/a.toml: is not valid TOML."
    )


def test_load_theme_file_raises_theme_error_with_every_problem(tmp_path: Path) -> None:
    file = write(tmp_path, "bad.toml", with_changes(primary="blurple", panel=None, dark=1))
    with pytest.raises(UserFileError) as caught:
        load_theme_file(file)
    assert isinstance(caught.value, KvchatError)
    fields = sorted(problem.field or "" for problem in caught.value.problems)
    assert fields == ["dark", "panel", "primary"]
    assert str(caught.value).count(str(file)) == 3


def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    user_dir = tmp_path / "themes"
    (user_dir / "folder.toml").mkdir(parents=True)
    (user_dir / "latin1.toml").write_bytes(b'name = "caf\xe9"\n')
    themes, problems = load_themes(user_dir)
    assert len(themes) == len(builtin_themes())
    assert {(problem.path.name, problem.field) for problem in problems} == {
        ("folder.toml", None),
        ("latin1.toml", None),
    }
    assert any("is a folder: only regular files are read" in str(p) for p in problems)
    assert any("UTF-8" in str(problem) for problem in problems)


def test_builtin_without_every_variable_is_an_error(tmp_path: Path) -> None:
    file = write(tmp_path, "partial.toml", good_document("partial"))
    with pytest.raises(UserFileError) as caught:
        load_theme_file(file, require_all_variables=True)
    assert {problem.field for problem in caught.value.problems} == {
        f"variables.{name}" for name in APP_VARIABLES
    }


# --- where the built-in files are -------------------------------------------


def test_builtin_dir_is_the_repository_themes_folder_in_a_source_tree() -> None:
    assert builtin_themes_dir() == REPO / "themes"


def test_builtin_dir_prefers_the_installed_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site-packages" / "chat"
    (package / "_themes").mkdir(parents=True)
    monkeypatch.setattr(chat, "__file__", str(package / "__init__.py"))
    assert builtin_themes_dir() == package / "_themes"


def git_status(paths_to_check: list[str]) -> str | None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    command = ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "--"]
    result = subprocess.run(
        [*command, *paths_to_check], cwd=REPO, capture_output=True, text=True, check=False
    )
    return result.stdout if result.returncode == 0 else None


def test_wheel_ships_every_builtin_theme(tmp_path: Path) -> None:
    if importlib.util.find_spec("build") is None:
        pytest.skip("the `build` package is not installed (pip install -e '.[test]')")
    # Paths a build could write into; other files in the tree may change
    # under us while other work goes on, so only these are compared.
    watched = ["themes", "chat/_themes", "build", "dist", "chat"]
    before = git_status(watched)
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO)]
    if importlib.util.find_spec("hatchling") is not None:
        # The backend is already here: build offline, in a few seconds.
        command.insert(3, "--no-isolation")
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr

    wheels = list(tmp_path.glob("kvchat-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
    theme_files = sorted((REPO / "themes").glob("*.toml"))
    assert len(theme_files) >= 5
    for file in theme_files:
        assert f"chat/_themes/{file.name}" in names
    assert not (REPO / "chat" / "_themes").exists()
    if before is not None:
        assert git_status(watched) == before


# --- Textual accepts them -----------------------------------------------------


class ThemedApp(App[None]):
    """An app whose CSS uses every app variable, as kvchat's stylesheets do."""

    CSS = "\n".join(f"#{name} {{ background: ${name}; }}" for name in APP_VARIABLES)

    def __init__(self, themes: list[KvchatTheme]) -> None:
        self.kvchat_themes = themes  # before App.__init__, which reads the defaults
        super().__init__()
        for theme in themes:
            self.register_theme(theme)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # The CSS is parsed before the first theme change.
        return dict(self.kvchat_themes[0].variables)

    def compose(self) -> ComposeResult:
        for name in APP_VARIABLES:
            yield Static(name, id=name)


async def test_textual_app_uses_every_theme(tmp_path: Path) -> None:
    themes = [*builtin_themes(), example_theme(tmp_path)]
    app = ThemedApp(themes)
    async with app.run_test() as pilot:
        for theme in themes:
            app.theme = theme.name
            await pilot.pause()
            assert app.theme_variables["meter-free"] == theme.variables["meter-free"]
            assert app.get_css_variables()["background"] == Color.parse(theme.background).hex
            for name in APP_VARIABLES:
                widget = app.query_one(f"#{name}", Static)
                expected = Color.parse(theme.variables[name])
                assert widget.styles.background == expected, (theme.name, name)


# --- the manual's Themes page (docs/themes.md) --------------------------------------


def themes_page() -> str:
    return (REPO / "docs" / "themes.md").read_text(encoding="utf-8")


def test_the_themes_page_shows_example_theme_toml() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", themes_page(), re.DOTALL)
    assert example_theme_toml() in blocks


def test_the_themes_page_names_every_builtin_theme() -> None:
    section = themes_page()
    for theme in builtin_themes():
        assert f"`{theme.name}`" in section


def test_a_theme_colours_the_meters_tools_and_thinking(tmp_path: Path) -> None:
    # They took the colours of other segments, and a theme naming them was
    # skipped whole ("is not a variable kvchat or Textual knows").
    colours = {"meter-tools": "#aa5500", "meter-thinking": "#ff0000"}
    file = write(tmp_path, "mine.toml", with_changes(variables=colours))
    theme = load_theme_file(file)
    assert {name: theme.variables[name] for name in colours} == colours
