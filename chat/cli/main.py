"""The `chat` / `kvchat` command: parse arguments, resolve settings, pick the
model, then run the TUI or one-shot mode."""

from __future__ import annotations

import argparse
import codecs
import gc
import io
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chat import __version__, paths
from chat.cli.terminal_output import guard_terminal_output
from chat.errors import ConfigError, KvchatError, ModelError
from chat.models.files import (
    ModelCandidate,
    how_to_get_a_model,
    pick_model,
)
from chat.sanitize import sanitize_line
from chat.settings.effective import format_effective
from chat.settings.resolve import ResolvedSettings, resolve_settings
from chat.settings.schema import Settings

if TYPE_CHECKING:
    from chat.settings.user_files import FileProblem

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for such a writer

# CLI flag -> dotted setting key. Values stay strings here and are checked by
# config.parse_value, so a bad flag gets the same message as a bad config line.
SETTING_FLAGS = {
    "model": "model.path",
    "ctx": "model.n_ctx",
    "gpu_layers": "model.n_gpu_layers",
    "plain_template": "model.plain_template",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "seed": "sampling.seed",
    "max_tokens": "sampling.max_tokens",
    "system": "chat.system_prompt",
    "theme": "ui.theme",
    "server": "server.url",
    "server_kind": "server.kind",
    "server_model": "server.model",
    "api_key_env": "server.api_key_env",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chat",
        description="Chat with a local GGUF model, or a model server, in your terminal.",
        epilog=(
            "Without -p, opens the chat app. "
            "Settings: CLI flag > KVCHAT_* environment > config file > default."
        ),
    )
    parser.add_argument("-p", "--prompt", help="one-shot: print the reply to this prompt and exit")
    parser.add_argument(
        "--json", action="store_true", help="one-shot: print reply and stats as JSON"
    )
    parser.add_argument(
        "--hide-thinking",
        action="store_true",
        help="one-shot: do not show a reasoning model's thinking (shown on stderr when it is a "
        "terminal; stdout has the answer alone, --json both)",
    )
    parser.add_argument(
        "--json-schema",
        metavar="FILE",
        help="one-shot: the reply is JSON valid for the JSON Schema in FILE (a grammar "
        "constrains the model; a model loaded in kvchat only)",
    )
    parser.add_argument(
        "--allow-tool",
        metavar="SERVER.TOOL",
        action="append",
        default=[],
        help="one-shot: the model may call this tool of this tool server (mcp.json); "
        "SERVER.* allows all of its tools; repeat for more. Other calls are refused",
    )
    parser.add_argument("-m", "--model", metavar="PATH", help="GGUF model file to load")
    parser.add_argument(
        "--list-models",
        action="store_true",
        help="list the GGUF models kvchat can find, with the memory each needs (--json too)",
    )
    parser.add_argument(
        "--pull",
        metavar="SPEC",
        help="download a model: a Hugging Face repo (org/repo[:QUANT]) or a .gguf URL",
    )
    parser.add_argument("--system", metavar="TEXT", help="system prompt")
    parser.add_argument("--temperature", metavar="T", help="sampling temperature (0 = greedy)")
    parser.add_argument("--top-p", metavar="P", help="nucleus sampling threshold")
    parser.add_argument(
        "--seed", metavar="N", help="fixed seed ('random' for a new one each reply)"
    )
    parser.add_argument("--max-tokens", metavar="N", help="most tokens in one reply")
    parser.add_argument("--ctx", metavar="N", help="context window in tokens (0 = the model's own)")
    parser.add_argument("--gpu-layers", metavar="N", help="layers to offload to the GPU (-1 = all)")
    parser.add_argument(
        "--plain-template",
        action="store_const",
        const=True,
        help="use plain ChatML if the model's chat template fails or runs over its limits",
    )
    remote = parser.add_argument_group(
        "model servers", "use a running llama-server, vLLM, Ollama or OpenAI-compatible server"
    )
    remote.add_argument(
        "--server",
        metavar="URL",
        help="chat with the model server at URL instead of a local model ('' = local)",
    )
    remote.add_argument(
        "--server-kind",
        metavar="KIND",
        help="auto (ask the server), llama-server, vllm, ollama or openai",
    )
    remote.add_argument(
        "--server-model", metavar="NAME", help="served model to use (default: its first)"
    )
    remote.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the server's API key (never the key itself)",
    )
    parser.add_argument(
        "--theme", metavar="NAME", help="colour theme for this run (not saved; see --list-themes)"
    )
    parser.add_argument(
        "--list-themes", action="store_true", help="list the colour themes, built-in and yours"
    )
    parser.add_argument(
        "--list-presets",
        action="store_true",
        help="list the presets (a system prompt with sampling settings), built-in and yours",
    )
    parser.add_argument(
        "--config", metavar="PATH", help="use this config file instead of the default"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective settings and exit"
    )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="tool servers (MCP, mcpServers JSON) for this run instead of mcp.json "
        "in the config folder",
    )
    saved = parser.add_argument_group("saved conversations")
    opening = saved.add_mutually_exclusive_group()
    opening.add_argument(
        "--continue",
        dest="continue_last",
        action="store_true",
        help="open the most recent conversation",
    )
    opening.add_argument("--resume", metavar="ID", type=int, help="open conversation ID")
    saved.add_argument("--list", action="store_true", help="list saved conversations and exit")
    saved.add_argument(
        "--export", metavar="ID", type=int, help="print conversation ID (see --format) and exit"
    )
    saved.add_argument(
        "--format",
        choices=("md", "json"),
        default="md",
        help="--export format (default: md); json holds every branch, md the one last shown",
    )
    saved.add_argument(
        "--all-branches",
        action="store_true",
        help="with --export --format md: every branch, one after the other",
    )
    saved.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        help="import a JSON conversation, print its new id and exit",
    )
    parser.add_argument("--version", action="version", version=f"kvchat {__version__}")
    return parser


def _resolve(args: argparse.Namespace) -> ResolvedSettings:
    config_path = (
        paths.config_file() if args.config is None else paths.Path(args.config).expanduser()
    )
    cli = {key: getattr(args, flag) for flag, key in SETTING_FLAGS.items()}
    flags = {key: "--" + flag.replace("_", "-") for flag, key in SETTING_FLAGS.items()}
    return resolve_settings(config_path, cli, os.environ, cli_flags=flags)


def _warn_theme_problems(problems: Sequence[FileProblem]) -> None:
    for problem in problems:
        # A problem reads "<file>: field 'x': what is wrong."
        print(f"chat: warning: skipped theme file {problem}", file=sys.stderr)


def _print_themes(in_use: str) -> None:
    """Every theme with its mode and description; bad user theme files on stderr."""
    # Imported here: chat.ui.themes imports Textual, which `chat -p` never needs.
    from chat.ui.themes import DEFAULT_THEME, load_themes, unknown_theme_message

    themes, problems = load_themes()
    _warn_theme_problems(problems)
    names = [theme.name for theme in themes]
    if in_use not in names:  # from the config file or KVCHAT_THEME
        message = unknown_theme_message(in_use, names)
        print(f"chat: warning: {message} chat starts with {DEFAULT_THEME}.", file=sys.stderr)
        in_use = DEFAULT_THEME
    # Names and descriptions come from theme files: cleaned even on a pipe.
    shown_names = [sanitize_line(theme.name) for theme in themes]
    width = max(len(name) for name in shown_names)
    for name, theme in zip(shown_names, themes, strict=True):
        mark = "*" if theme.name == in_use else " "
        mode = "dark" if theme.dark else "light"
        notes = [theme.description] if theme.description else []
        if theme.name == DEFAULT_THEME:
            notes.append("(default)")
        if not theme.builtin:
            notes.append(f"(your theme: {theme.path})")
        print(f"{mark} {name:<{width}}  {mode:<5}  {sanitize_line(' '.join(notes))}")
    print()
    print("* = the theme chat starts with. Pick another for one run with --theme NAME,")
    print("or in the app with Ctrl+P > Theme (saved as ui.theme in config.toml).")
    print(f"Your own themes: one .toml file each in {paths.user_themes_dir()}")
    print("(docs/themes.md has an example file to start from).")


def _check_theme(name: str) -> None:
    """A --theme that names no theme is a usage error (exit 2)."""
    from chat.ui.themes import load_themes, unknown_theme_message

    themes, problems = load_themes()
    names = [theme.name for theme in themes]
    if name not in names:
        _warn_theme_problems(problems)  # perhaps the theme meant is in a bad file
        raise KvchatError(unknown_theme_message(name, names))


def _read_prompt(args: argparse.Namespace) -> str | None:
    """The one-shot prompt: -p, or standard input when it is not a terminal."""
    if args.prompt is not None:
        return _undo_surrogates(str(args.prompt))
    if not sys.stdin.isatty():
        return _undo_surrogates(sys.stdin.read())
    return None


def _undo_surrogates(text: str) -> str:
    """Bytes the locale's encoding could not decode (UTF-8 typed under LC_ALL=C)
    reach Python as lone surrogates, which no model can take: read them as
    UTF-8, and what is not UTF-8 as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


OUTPUT_ERRORS = "kvchat.escape"


def _escape(error: UnicodeError) -> tuple[str, int]:
    """What the output cannot encode, as JSON writes it (`\\u00e9`, a pair for
    characters past U+FFFF): text stays readable and JSON output stays JSON.
    (Python's backslashreplace writes `\\xe9`, which JSON does not allow.)"""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escaped = []
    for character in error.object[error.start : error.end]:
        code = ord(character)
        if code > 0xFFFF:
            code -= 0x10000
            escaped.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escaped.append(f"\\u{code:04x}")
    return "".join(escaped), error.end


def _output_never_fails() -> None:
    """Characters the output's encoding cannot hold (a non-UTF-8 locale such as
    LC_ALL=C), and file names that are not UTF-8 (lone surrogates), print as
    escapes rather than end kvchat with UnicodeEncodeError."""
    codecs.register_error(OUTPUT_ERRORS, _escape)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=OUTPUT_ERRORS)


def main(argv: Sequence[str] | None = None) -> int:
    _output_never_fails()
    guard_terminal_output()
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KvchatError as error:
        print(f"chat: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`chat -p ... | head`): stop quietly, as other
        # command-line tools do. Point stdout at /dev/null so that Python's own
        # flush at exit does not fail a second time.
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:
        # No KvchatError names it, yet it is the system, not a bug: the disk
        # under `chat --export 3 > file` is full, a file vanished. One sentence.
        print(f"chat: {_os_error_sentence(error)}", file=sys.stderr)
        return EXIT_FAILURE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not
    fail a second time on output that cannot be written."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _os_error_sentence(error: OSError) -> str:
    reason = error.strerror or str(error)
    if error.filename is not None:
        return f"{error.filename}: {reason}."
    if not sys.stdout.isatty():
        # An error without a file name comes from a stream: here, the output
        # redirected to a file or a pipe. Its unwritten rest is dropped.
        _drop_stdout()
        return f"cannot write the output: {reason}."
    return f"{reason}."


def _local_model_or_server(args: argparse.Namespace, resolved: ResolvedSettings) -> None:
    """`--model` on the command line is more specific than a server from the
    environment or the config file: it wins (the server is left out for this
    run). With `--server` too it is a usage error."""
    server = resolved.settings.server
    if not args.model or not server.url:
        return
    if resolved.sources["server.url"] == "cli":
        raise KvchatError(
            "--model and --server cannot go together: --model loads a local model, "
            "--server uses a model server instead."
        )
    # Set for this run only: the settings pane says so, and Save keeps the
    # config file's own server.
    server.url = None
    resolved.sources["server.url"] = "cli"
    resolved.origins["server.url"] = "--model"


def _run(args: argparse.Namespace) -> int:
    resolved = _resolve(args)
    settings = resolved.settings
    if args.theme is not None:
        _check_theme(args.theme)
    problems = [str(problem) for problem in resolved.problems]
    if args.print_config or args.list_models or args.list_themes or args.list_presets:
        _warn(problems)
        if args.list_presets:
            from chat.cli.presets import print_presets

            return print_presets()
        if args.print_config:
            from chat.cli.tool_servers import describe, tool_servers_for_run

            tool_servers = tool_servers_for_run(args.mcp_config)
            _warn(list(tool_servers.problems))
            print(format_effective(resolved))
            print()
            print(describe(tool_servers))
        elif args.list_models:
            from chat.cli.models import print_models

            return print_models(settings.model, as_json=args.json, out=sys.stdout)
        else:
            _print_themes(settings.ui.theme)
        return 0
    if args.pull is not None:
        from chat.cli.models import pull_model

        return pull_model(args.pull)
    if args.all_branches and args.export is None:
        raise KvchatError("--all-branches goes with --export (chat --export ID --all-branches).")
    if args.list or args.export is not None or args.import_file is not None:
        return _run_conversation_command(args)
    _local_model_or_server(args, resolved)
    reopening = args.continue_last or args.resume is not None
    if reopening and args.prompt is not None:
        raise KvchatError("--continue and --resume open the chat app; -p cannot go with them.")
    # Reopening a conversation always opens the app, even with stdin redirected.
    prompt = None if reopening else _read_prompt(args)
    if prompt is None and (args.json_schema or args.allow_tool):
        raise KvchatError("--json-schema and --allow-tool go with -p (one-shot mode).")
    if prompt is not None:
        _warn(problems)
        if not prompt.strip():
            raise KvchatError('The prompt is empty: pass it with -p "..." or on standard input.')
        run: Callable[..., int]
        extras = _oneshot_extras(args, settings, bool(settings.server.url))
        if settings.server.url:
            from chat.cli.oneshot import run_oneshot_on_server
            from chat.session.server_choice import server_config

            server = server_config(settings.server, os.environ)
            assert server is not None
            run = partial(run_oneshot_on_server, prompt, settings, server, **extras)
        else:
            model = pick_model(args.model, None if args.model else settings.model.path)
            if model is None:
                raise KvchatError(how_to_get_a_model())
            from chat.cli.oneshot import run_oneshot

            run = partial(run_oneshot, prompt, settings, model, **extras)
        return run(as_json=args.json, out=sys.stdout, show_thinking=not args.hide_thinking)
    return _run_app(args, resolved, problems)


def _oneshot_extras(
    args: argparse.Namespace, settings: Settings, on_server: bool
) -> dict[str, Any]:
    """`--json-schema` and `--allow-tool`, checked before a model is loaded:
    the grammar and the tools for `run_oneshot`."""
    if not args.json_schema and not args.allow_tool:
        return {}
    if on_server and args.json_schema:
        raise KvchatError(
            "--json-schema works only with a model loaded in kvchat for now, "
            "not with a model server."
        )
    if args.json_schema and args.allow_tool:
        raise KvchatError("--json-schema and --allow-tool cannot go together.")
    if args.json_schema:
        from chat.cli.oneshot import json_schema_grammar

        return {"grammar": json_schema_grammar(Path(args.json_schema).expanduser())}
    from chat.cli.oneshot_tools import OneShotTools
    from chat.cli.tool_servers import tool_servers_for_run
    from chat.session.tool_loop import ToolLoopSettings
    from chat.tools.permissions import parse_allow_tool

    grants = tuple(parse_allow_tool(text) for text in args.allow_tool)
    config = tool_servers_for_run(args.mcp_config)
    _warn(list(config.problems))
    tools = OneShotTools(config, grants, ToolLoopSettings.from_settings(settings.tools))
    tools.servers()  # names a server the file lacks: said before a model loads
    return {"tools": tools}


def _warn(problems: list[str]) -> None:
    """Config and environment problems: reported, never fatal."""
    for problem in problems:
        print(f"chat: warning: {problem}", file=sys.stderr)


def _run_app(args: argparse.Namespace, resolved: ResolvedSettings, problems: list[str]) -> int:
    settings = resolved.settings
    model_error: str | None = None
    model: ModelCandidate | None
    if settings.server.url:
        from chat.session.server_choice import server_config

        try:
            server = server_config(settings.server, os.environ)
        except ConfigError as error:
            # A key variable not set: open the app anyway and say so there.
            model, model_error = None, str(error)
        else:
            assert server is not None
            model = ModelCandidate.for_server(server)
    elif args.model:
        model = pick_model(args.model, None)  # a bad --model is a usage error: stderr, exit 2
    else:
        try:
            model = pick_model(None, settings.model.path)
        except ModelError as error:
            # The config names a bad file: open the app anyway and say so there.
            model, model_error = None, str(error)
    resume = _conversation_to_open(args, problems)
    if not sys.stdout.isatty():
        # Textual would draw the app's screens into the file or the pipe.
        raise KvchatError(
            "The chat app needs a terminal to draw on, and standard output is not one. "
            'For an answer in a pipe or a file, use one-shot mode: chat -p "...".'
        )
    from chat.cli.tool_servers import tool_servers_for_run

    # Read now, so a bad file is said at once (a notice in the app); the app
    # starts the servers in the background once its first frame is drawn.
    tool_servers = tool_servers_for_run(args.mcp_config)
    problems.extend(tool_servers.problems)
    # Startup builds many objects that live as long as the app (Textual's styles,
    # widgets, modules): the cyclic collector would walk them again and again.
    # It stays off until the first frame is drawn (ChatApp turns it back on).
    gc.disable()
    # Imported late: `chat -p` and `--list-models` need no Textual.
    from chat.runtime.background import threads_ended
    from chat.runtime.stray_errors import keep_stray_errors_off_screen

    # A finalizer's or a thread's uncaught error (a server's pipe collected
    # after the event loop closed) would print its traceback on the terminal.
    keep_stray_errors_off_screen(paths.stray_errors_file())
    from chat.ui.app import ChatApp, Launch

    # Saving from the settings pane keeps a file that had problems as config.toml.bak.
    file_problems = any(problem.path == resolved.config_path for problem in resolved.problems)
    run_overrides = {
        key: resolved.origins.get(key, source)
        for key, source in resolved.sources.items()
        if source in ("cli", "env")
    }
    app = ChatApp(
        Launch(
            settings,
            model,
            model_error=model_error,
            startup_problems=problems,
            config_path=resolved.config_path,
            config_had_problems=file_problems,
            run_overrides=run_overrides,
            resume=resume,
            tool_servers=tool_servers.servers,
        )
    )
    app.run()
    code = app.return_code or 0  # 1 after an unexpected error (chat.ui.crash_report)
    # The app has waited for the model to be free (see ChatApp.on_unmount): a
    # thread still running now is one that cannot be stopped (a model load, a
    # long prompt being evaluated): a normal exit would unload llama.cpp under
    # it and crash.
    # The app has closed all it wrote (database, terminal): leave at once.
    if not threads_ended(timeout=0.2):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_conversation_command(args: argparse.Namespace) -> int:
    from chat.cli import conversations as conversations_cli
    from chat.conversations.store import Store

    with Store(paths.database_file()) as store:
        if args.import_file is not None:
            conversations_cli.import_file(store, paths.Path(args.import_file), sys.stdout)
        elif args.export is not None:
            conversations_cli.export(
                store, args.export, args.format, sys.stdout, all_branches=args.all_branches
            )
        else:
            from chat.engine.state_cache import StateCache

            saved_states = StateCache(paths.kv_states_dir(), 0).keys()
            conversations_cli.print_list(store, sys.stdout, saved_states)
    return 0


def _conversation_to_open(args: argparse.Namespace, problems: list[str]) -> int | None:
    """The id that --continue or --resume asks for; an unknown id is a usage error."""
    if not args.continue_last and args.resume is None:
        return None
    from chat.cli import conversations as conversations_cli
    from chat.conversations.store import Store

    with Store(paths.database_file()) as store:
        if args.resume is not None:
            return conversations_cli.check_exists(store, args.resume)
        latest = store.latest_conversation_id()
    if latest is None:
        problems.append("There are no saved conversations yet: this is a new one.")
    return latest
