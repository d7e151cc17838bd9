"""An error that nothing in kvchat handled: the app stops (as Textual does,
since its state is then unknown), but the traceback goes to a report file in
the state folder instead of onto the user's terminal, which gets one sentence:
what happened, that nothing written is lost, and where the details are."""

from __future__ import annotations

import platform
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path

from rich.console import Group
from rich.text import Text

from chat import __version__
from chat.sanitize import sanitize


def write_crash_report(error: BaseException, folder: Path) -> Path | None:
    """The report's path, or None when it could not be written (a full disk, a
    read-only folder): then the caller shows the traceback after all."""
    now = time.localtime()  # one time for the file's name and its first line
    what_ran = [f"kvchat {__version__}", f"Python {platform.python_version()}"]
    for package in ("textual", "llama-cpp-python"):
        try:
            what_ran.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    what_ran.append(sys.platform)
    header = f"{time.strftime('%Y-%m-%d %H:%M:%S', now)} · {' · '.join(what_ran)}\n\n"
    text = header + "".join(traceback.format_exception(error))
    path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S', now)}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError:
        return None
    return path


def crash_notice(error: BaseException, report: Path) -> Group:
    """What the terminal shows once the app has stopped (plain text: the
    error's message may quote anything, a model's output included). The
    report's path has a line of its own (folded where the terminal is
    narrower: Rich cuts what does not fit), under ~ for the home folder."""
    what = sanitize(f"{type(error).__name__}: {error}")
    return Group(
        Text(
            f"kvchat stopped on an unexpected error ({what}). Your conversations "
            "are saved as they were; a reply that was being written is kept and "
            "marked interrupted. The details are in this file (please include it "
            "if you report the error):"
        ),
        Text(_under_home(report), overflow="fold"),
    )


def _under_home(path: Path) -> str:
    try:
        return str(Path("~") / path.relative_to(Path.home()))
    except ValueError:  # elsewhere (KVCHAT_STATE_DIR)
        return str(path)
