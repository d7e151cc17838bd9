"""Settings: one schema, and where values come from.

- `schema`: every setting, declared once (`FieldSpec` on dataclass fields);
- `values`: checking and converting one value;
- `config_file`: the TOML file, read leniently and written atomically;
- `environment`: KVCHAT_* variables;
- `resolve`: CLI flag > environment > config file > default;
- `effective`: the `--print-config` listing;
- `server_url`: a server's URL as it may be saved or shown (no password).
- `presets`: named system prompts with sampling settings, built-in
  (`builtin_presets`) and the user's files;
- `user_files`: reading the user's TOML files (presets, themes) and reporting
  their mistakes.

Who reads which section: `model` the model loader (chat.runtime.model_loader)
and the engine; `server` the CLI and the model loader, through
chat.session.server_choice (a server, when set, replaces the local model);
`sampling` the engine, per reply; `chat` the chat screen and the reply
planning; `ui` the app (theme). No Textual and no llama_cpp here.
"""
