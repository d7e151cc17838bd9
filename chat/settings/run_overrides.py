"""Settings given for this run only, by a command-line flag or a KVCHAT_*
variable: Save in the settings pane keeps the config file's own value for
those, unless the user changed them in the pane since."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from chat.settings.config_file import load_config
from chat.settings.schema import Settings
from chat.settings.values import get_value, set_value


class RunOverrides:
    def __init__(self, origins: Mapping[str, str], settings: Settings) -> None:
        """`origins`: each overridden key with where it came from ("--temperature",
        "KVCHAT_SEED"); `settings`: the settings as the run started."""
        self.origins = dict(origins)
        self._values = {key: copy.deepcopy(get_value(settings, key)) for key in self.origins}

    def notes(self) -> dict[str, str]:
        """A note per overridden setting, for the settings pane."""
        return {key: f"Set by {origin} for this run." for key, origin in self.origins.items()}

    def settings_to_save(self, settings: Settings, config_path: Path) -> Settings:
        """`settings` less the values set for this run only and unchanged since:
        those keep the value the config file has."""
        to_save = copy.deepcopy(settings)
        unchanged = [
            key for key, value in self._values.items() if get_value(settings, key) == value
        ]
        if unchanged:
            in_file, _ = load_config(config_path)
            for key in unchanged:
                set_value(to_save, key, copy.deepcopy(get_value(in_file, key)))
        return to_save
