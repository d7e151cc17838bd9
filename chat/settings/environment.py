"""Environment variables: KVCHAT_<SECTION>_<NAME> for every setting, short
aliases for the common ones, and a hint for a variable that sets nothing."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path

from chat.paths import FOLDER_ENV_NAMES
from chat.settings.config_file import ConfigProblem
from chat.settings.schema import FIELDS

# Short environment names for the settings people change most often. The long
# form KVCHAT_<SECTION>_<NAME> works for every setting and wins over these.
ENV_ALIASES: dict[str, str] = {
    "model.path": "KVCHAT_MODEL",
    "sampling.temperature": "KVCHAT_TEMPERATURE",
    "sampling.seed": "KVCHAT_SEED",
    "chat.system_prompt": "KVCHAT_SYSTEM_PROMPT",
    "ui.theme": "KVCHAT_THEME",
}


def env_names(key: str) -> list[str]:
    """Environment variables that set `key`, the one that wins first."""
    long_name = "KVCHAT_" + key.replace(".", "_").upper()
    return [long_name] + ([ENV_ALIASES[key]] if key in ENV_ALIASES else [])


def unknown_env_problems(
    env: Mapping[str, str], exempt: Collection[str] = ()
) -> list[ConfigProblem]:
    """A KVCHAT_ variable that sets nothing is most likely a misspelt setting:
    say so, and name the variable that was probably meant. `exempt`: variables
    that are not settings but are used all the same (the one `server.api_key_env`
    names). Only names are ever shown, never values."""
    known = {name for key in FIELDS for name in env_names(key)} | set(FOLDER_ENV_NAMES)
    problems = []
    for name in sorted(env):
        if not name.startswith("KVCHAT_") or name in known or name in exempt:
            continue
        if name.endswith(("_KEY", "_TOKEN")):
            message = (
                f"{name} is not a kvchat setting and is ignored. A server's API key is read "
                "from the variable that server.api_key_env names "
                f"(--api-key-env {name} or KVCHAT_SERVER_API_KEY_ENV={name})."
            )
            problems.append(ConfigProblem(Path("<environment>"), None, None, message))
            continue
        # KVCHAT_MAX_TOKENS: a setting's own name without its section.
        same_name = [
            env_names(key)[0]
            for key, spec in FIELDS.items()
            if name == f"KVCHAT_{spec.name.upper()}"
        ]
        meant = same_name or difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f" Did you mean {meant[0]}?" if meant else ""
        message = f"{name} is not a kvchat setting and is ignored.{hint}"
        problems.append(ConfigProblem(Path("<environment>"), None, None, message))
    return problems
