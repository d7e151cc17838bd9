"""Presets: the built-in ones, user files (good and bad), `chat --list-presets`."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from chat import paths
from chat.cli.presets import print_presets
from chat.settings.builtin_presets import BUILTIN_PRESETS, DEFAULT_PRESET
from chat.settings.presets import (
    Preset,
    builtin_presets,
    example_preset_toml,
    find_preset,
    load_preset_file,
    load_presets,
    preset_from_document,
)
from chat.settings.schema import SamplingSettings
from chat.settings.user_files import UserFileError, problem_notices
from tests.conftest import write

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


def problems_of(path: Path) -> list[str]:
    with pytest.raises(UserFileError) as caught:
        load_preset_file(path)
    return [problem.detail for problem in caught.value.problems]


def test_builtin_presets_are_valid_and_useful() -> None:
    presets = builtin_presets()
    assert [preset.name for preset in presets] == [doc["name"] for doc in BUILTIN_PRESETS]
    assert presets[0].name == DEFAULT_PRESET
    assert all(preset.builtin and preset.description for preset in presets)
    by_name = {preset.name: preset for preset in presets}
    # "default" changes nothing: the configured prompt and sampling.
    default = by_name[DEFAULT_PRESET]
    configured = SamplingSettings(temperature=0.66, seed=5)
    assert default.system_prompt_for("Be brief.") == "Be brief."
    assert default.sampling_for(configured) == configured
    # The others set a prompt of their own, and the coder samples near greedy.
    assert all(by_name[name].system_prompt for name in ("concise", "coder", "creative"))
    assert by_name["coder"].sampling_for(configured).temperature == 0.2
    assert by_name["coder"].sampling_for(configured).seed == 5  # what it leaves alone
    assert by_name["creative"].sampling["temperature"] > 1


def test_a_user_preset_file(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        "reviewer.toml",
        'name = "reviewer"\ndescription = "terse code review"\n'
        'system_prompt = """\nYou review code.\nList problems first."""\n'
        '[sampling]\ntemperature = 0.3\nseed = 7\nstop = ["END"]\nmirostat_mode = 2\n',
    )
    preset = load_preset_file(file)
    assert preset == Preset(
        "reviewer",
        "terse code review",
        "You review code.\nList problems first.",
        {"temperature": 0.3, "seed": 7, "stop": ["END"], "mirostat_mode": 2},
        file,
    )
    assert not preset.builtin
    sampling = preset.sampling_for(SamplingSettings())
    assert (sampling.temperature, sampling.seed, sampling.stop) == (0.3, 7, ["END"])
    sampling.stop.append("more")  # the preset's own list is not shared
    assert preset.sampling["stop"] == ["END"]
    assert preset.summary() == 'temperature 0.3 · seed 7 · stop ["END"] · mirostat_mode 2'


def test_a_blank_system_prompt_sends_none_and_an_absent_one_keeps_yours() -> None:
    blank = preset_from_document({"name": "raw", "system_prompt": ""})
    assert blank.system_prompt_for("Be kind.") == ""
    assert blank.summary() == "no system prompt"
    absent = preset_from_document({"name": "warm", "sampling": {"temperature": 1.0}})
    assert absent.system_prompt_for("Be kind.") == "Be kind."


def test_every_mistake_in_a_file_is_reported(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        "bad.toml",
        'nmae = "x"\ntemperature = 0.1\ndescription = "two\\nlines"\nsystem_prompt = 3\n'
        "[sampling]\ntemperature = 9\ntop_q = 0.5\nseed = -1\ntop_k = true\nstop = [1]\n",
    )
    assert problems_of(file) == [
        "field 'nmae': is not a preset field; did you mean 'name'?",
        "field 'temperature': is a sampling setting; put it in the [sampling] table at the end.",
        "field 'name': is missing; every preset has a name.",
        "field 'description': must be one line of printable text; it is shown in lists.",
        "field 'system_prompt': must be a string, not a whole number.",
        "field 'sampling.temperature': 9 is out of range: allowed 0 – 5.",
        "field 'sampling.top_q': is not a sampling setting; did you mean 'top_p'?",
        "field 'sampling.seed': -1 is out of range: allowed blank = random, or 0 – 4294967295.",
        "field 'sampling.top_k': true is not a whole number: allowed 0 – 1000.",
        "field 'sampling.stop': [1] has an item that is not text: allowed a list of "
        "non-empty strings.",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name = \n", "is not valid TOML: Invalid value (at line 1, column 8)."),
        ("name = 5\n", "field 'name': must be a string, not a whole number."),
        ('name = " padded"\n', "field 'name': ' padded' cannot be a preset name"),
        ('name = "a\\u001b[31mred"\n', "field 'name': must be one line of printable text"),
        (f'name = "{"x" * 41}"\n', "cannot be a preset name (1 to 40 characters"),
        ('name = "x"\nsampling = 0.5\n', "field 'sampling': must be a [sampling] table"),
    ],
)
def test_bad_names_and_files(tmp_path: Path, text: str, expected: str) -> None:
    file = write(tmp_path, "bad.toml", text)
    [problem] = problems_of(file)
    assert expected in problem


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    file = tmp_path / "binary.toml"
    file.write_bytes(b"name = \xff\n")
    assert problems_of(file) == ["is not UTF-8 text."]


def test_load_presets_skips_bad_files_and_keeps_the_rest() -> None:
    folder = paths.user_presets_dir()
    write(folder, "a-mine.toml", {"name": "mine", "sampling": {"temperature": 0.1}})
    bad = write(folder, "b-bad.toml", {"name": "bad", "sampling": {"temperature": "hot"}})
    again = write(folder, "c-again.toml", {"name": "mine", "system_prompt": "other"})
    mine_coder = write(folder, "d-coder.toml", {"name": "coder", "system_prompt": "My coder."})
    write(folder, "notes.txt", "not a preset")
    presets, problems = load_presets()
    names = [preset.name for preset in presets]
    # A user preset named like a built-in one replaces it, in its place.
    assert names == ["default", "concise", "coder", "creative", "mine"]
    coder = find_preset(presets, "coder")
    assert coder is not None and coder.path == mine_coder
    assert coder.system_prompt == "My coder." and coder.sampling == {}
    assert [str(problem) for problem in problems] == [
        f"{bad}: field 'sampling.temperature': \"hot\" is not a number: allowed 0 – 5.",
        f"{again}: field 'name': 'mine' is already the name of {folder / 'a-mine.toml'}; "
        "this file is skipped.",
    ]
    assert find_preset(presets, "bad") is None


def test_no_folder_is_no_presets_and_a_file_in_its_place_is_reported() -> None:
    presets, problems = load_presets()
    assert [preset.name for preset in presets] == [doc["name"] for doc in BUILTIN_PRESETS]
    assert problems == []
    folder = paths.user_presets_dir()
    folder.parent.mkdir(parents=True)
    folder.write_text("oops")
    presets, problems = load_presets()
    assert len(presets) == len(BUILTIN_PRESETS)
    assert [problem.detail for problem in problems] == ["should be a folder of preset files."]


def test_problem_notices_one_per_file(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        "bad.toml",
        {"nam": 1, "x": 2, "y": 3, "z": 4, "sampling": {"temperature": 7}},
    )
    with pytest.raises(UserFileError) as caught:
        load_preset_file(file)
    [notice] = problem_notices(caught.value.problems, "chat --list-presets")
    lines = notice.splitlines()
    assert lines[0] == f"{file}:"
    assert len(lines) == 5
    assert lines[-1] == "… and 3 more (`chat --list-presets` lists them)."


def test_the_example_file_is_a_valid_preset(tmp_path: Path) -> None:
    text = example_preset_toml()
    tomllib.loads(text)
    preset = load_preset_file(write(tmp_path, "example.toml", text))
    assert preset.name == "reviewer"
    assert preset.system_prompt is not None and preset.system_prompt.startswith("You review")
    assert preset.sampling == {"temperature": 0.3, "top_p": 0.9}


def test_list_presets() -> None:
    mine = write(paths.user_presets_dir(), "mine.toml", {"name": "mine", "description": "my own"})
    broken = write(paths.user_presets_dir(), "broken.toml", "name = \n")
    out, err = io.StringIO(), io.StringIO()
    assert print_presets(out, err) == 0
    listing, notes = out.getvalue().split("\n\n", 1)
    lines = listing.splitlines()
    assert [line.split()[0] for line in lines] == [
        "default",
        "concise",
        "coder",
        "creative",
        "mine",
    ]
    assert "low temperature · temperature 0.2 · min_p 0.1" in lines[2]
    assert lines[-1] == f"mine      my own · (your preset: {mine})"
    assert str(paths.user_presets_dir()) in notes
    assert err.getvalue().startswith(f"chat: warning: skipped preset file {broken}: is not valid")


def test_the_presets_page_shows_the_example_file_and_every_builtin_preset() -> None:
    page = (Path(__file__).parents[2] / "docs" / "presets.md").read_text(encoding="utf-8")
    assert f"```toml\n{example_preset_toml()}```" in page
    for document in BUILTIN_PRESETS:
        assert f"| `{document['name']}` |" in page
