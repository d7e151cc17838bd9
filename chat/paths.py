"""Where kvchat keeps its files, following each platform's conventions.

`KVCHAT_CONFIG_DIR` and `KVCHAT_DATA_DIR` override the platform locations;
the tests use them to run in a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "kvchat"
CONFIG_DIR_ENV = "KVCHAT_CONFIG_DIR"
DATA_DIR_ENV = "KVCHAT_DATA_DIR"
FOLDER_ENV_NAMES = (CONFIG_DIR_ENV, DATA_DIR_ENV)
"""kvchat's environment variables that are folders, not settings."""


def config_dir() -> Path:
    """Folder of `config.toml` and user themes."""
    override = os.environ.get(CONFIG_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Folder of the conversation database, the models folder and the logs."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override) if override else Path(platformdirs.user_data_dir(APP_NAME))


def config_file() -> Path:
    return config_dir() / "config.toml"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def models_dir() -> Path:
    """Drop `.gguf` files here and kvchat finds them."""
    return data_dir() / "models"


def database_file() -> Path:
    return data_dir() / "conversations.db"


def log_file() -> Path:
    """llama.cpp's own log lines go here, never to the terminal."""
    return data_dir() / "llama.log"
