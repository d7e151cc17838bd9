"""The README's and the manual's relative links resolve (`.ci/check-links`, run by `.ci/run`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECK_LINKS = REPO / ".ci" / "check-links"


def check_links(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK_LINKS), str(root)], capture_output=True, text=True, timeout=60
    )


def test_every_link_of_the_readme_and_the_docs_resolves() -> None:
    result = check_links(REPO)
    assert result.returncode == 0, result.stdout
    assert result.stdout == ""


def test_a_missing_page_and_a_missing_heading_are_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "themes.md").write_text(
        "# Themes\n\n## Your own themes\n\n```toml\n# not a heading\n```\n", encoding="utf-8"
    )
    (tmp_path / "README.md").write_text(
        "# kvchat\n\n"
        "[ok](docs/themes.md#your-own-themes) [web](https://example.org/x.md)\n"
        "`[in code](nowhere.md)`\n"
        "[gone](docs/presets.md) [no heading](docs/themes.md#not-a-heading)\n"
        "[here](#kvchat) [not here](#usage)\n",
        encoding="utf-8",
    )
    result = check_links(tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "README.md:5: docs/presets.md (no such file)",
        "README.md:5: docs/themes.md#not-a-heading (no heading #not-a-heading in themes.md)",
        "README.md:6: #usage (no heading #usage in README.md)",
    ]
