"""Resolving the settings in use: CLI flag > environment > config file > default.

A bad config file or environment variable never stops the app: the entry keeps
its default and the problem is reported. A bad CLI value raises `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from chat.errors import ConfigError
from chat.settings.config_file import ConfigProblem, read_config
from chat.settings.environment import env_names, unknown_env_problems
from chat.settings.schema import FIELDS, Settings
from chat.settings.values import ValueRefused, format_value, get_value, parse_value, set_value

Source = Literal["cli", "env", "config", "default"]


@dataclass
class ResolvedSettings:
    settings: Settings
    sources: dict[str, Source]
    """Where each key in FIELDS got its value."""
    problems: list[ConfigProblem]
    """Config file problems and bad environment variables."""
    config_path: Path
    origins: dict[str, str] = field(default_factory=dict)
    """The exact origin where one is known: "KVCHAT_TEMPERATURE", "--temperature"."""


def cli_flag(key: str) -> str:
    """The conventional flag for a setting: --temperature, --n-ctx; --model for model.path."""
    return "--model" if key == "model.path" else "--" + FIELDS[key].name.replace("_", "-")


def resolve_settings(
    config_path: Path,
    cli: Mapping[str, object],
    env: Mapping[str, str],
    *,
    cli_flags: Mapping[str, str] | None = None,
) -> ResolvedSettings:
    """Combine the sources. A bad CLI value raises ConfigError (the CLI exits with
    status 2); a bad environment variable is reported and skipped.

    `cli` maps dotted keys to argparse values, None meaning "not given".
    `cli_flags` names the flag of each key for `format_effective`, where the CLI
    spells one differently from `cli_flag(key)`.
    """
    settings, problems, applied = read_config(config_path)
    sources: dict[str, Source] = {key: "config" if key in applied else "default" for key in FIELDS}
    origins: dict[str, str] = {}

    for key in FIELDS:
        for name in env_names(key):
            if name not in env:
                continue
            try:
                value = parse_value(key, env[name])
            except ConfigError as error:
                fallback = "from the config file" if sources[key] == "config" else "the default"
                shown = format_value(key, get_value(settings, key))
                message = f"{name}: {error} Using {fallback} {shown}."
                problems.append(ConfigProblem(Path("<environment>"), None, key, message))
                continue
            set_value(settings, key, value)
            sources[key] = "env"
            origins[key] = name
            break

    for key, raw in cli.items():
        if raw is None:
            continue
        flag = (cli_flags or {}).get(key) or cli_flag(key)
        try:
            value = parse_value(key, raw)
        except ValueRefused as error:
            raise ConfigError(error.worded(flag)) from None  # "--ctx 5 is out of range"
        set_value(settings, key, value)
        sources[key] = "cli"
        origins[key] = flag

    # The variable holding a server's API key may be called KVCHAT_SOMETHING.
    key_variable = settings.server.api_key_env
    problems += unknown_env_problems(env, exempt=[key_variable] if key_variable else [])
    return ResolvedSettings(settings, sources, problems, config_path, origins)
