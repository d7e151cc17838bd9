"""`--print-config`: every setting in effect as TOML, each saying where it came from.

No secret is printed: a server's API key is no setting (only the name of the
variable holding it is), and a password in `server.url` shows as ***."""

from __future__ import annotations

import tomli_w

from chat.settings.resolve import ResolvedSettings
from chat.settings.schema import FIELDS
from chat.settings.server import url_for_display
from chat.settings.values import get_value


def _toml_value(value: object) -> str:
    """One value as TOML on one line (tomli_w would spread arrays over lines)."""
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def format_effective(resolved: ResolvedSettings) -> str:
    """Every setting as TOML, each with a comment saying where it came from."""
    lines = [
        "# kvchat settings in effect.",
        "# Order: command line > environment > config file > default.",
        f"# Config file: {resolved.config_path}",
    ]
    current = ""
    for key, spec in FIELDS.items():
        if spec.section != current:
            current = spec.section
            lines += ["", f"[{current}]"]
        source = resolved.sources.get(key, "default")
        origin = resolved.origins.get(key)
        if source == "cli":
            comment = f"from {origin or 'the command line'}"
        elif source == "env":
            comment = f"from {origin or 'the environment'}"
        elif source == "config":
            comment = f"from config file {resolved.config_path}"
        else:
            comment = "default"
        value = get_value(resolved.settings, key)
        if key == "server.url" and isinstance(value, str):
            value = url_for_display(value)  # a password in the URL shows as ***
        if value is None:
            lines.append(f"# {spec.name} = ({spec.none_label()})  # {comment}")
        else:
            lines.append(f"{spec.name} = {_toml_value(value)}  # {comment}")
    return "\n".join(lines) + "\n"
