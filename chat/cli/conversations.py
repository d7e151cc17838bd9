"""The saved-conversation commands of the CLI: --list, --export, --import, and
finding the conversation that --continue / --resume open. No Textual here."""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TextIO

from chat.conversations.store import ConversationNotFoundError, Store
from chat.conversations.transcript import ExportFormat, export_text, read_import_file
from chat.errors import KvchatError
from chat.sanitize import sanitize
from chat.session.resume import conversation_key


def _one_line(text: str) -> str:
    """Titles may come from imported files: no escape sequences, no line breaks."""
    return " ".join(sanitize(text).split())


def print_list(store: Store, out: TextIO, saved_states: AbstractSet[str] = frozenset()) -> None:
    """One line per conversation, newest first: id, last update, messages (on the
    branch shown), whether its KV cache is saved (it resumes instantly: see
    chat.session.resume; `saved_states` are the keys with one), title."""
    conversations = store.list_conversations(limit=store.count_conversations())
    if not conversations:
        print("No saved conversations yet.", file=out)
        return
    # As wide as the header too: ids under 10 were a column left of it.
    width = max(len("id"), len(str(max(c.id for c in conversations))))
    print(f"{'id':>{width}}  {'updated':16}  {'messages':>8}  {'resume':7}  title", file=out)
    for c in conversations:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        resume = "instant" if conversation_key(store.path, c.id) in saved_states else ""
        print(
            f"{c.id:>{width}}  {updated:16}  {c.message_count:>8}  {resume:7}  "
            f"{_one_line(c.title)}",
            file=out,
        )


def check_exists(store: Store, conv_id: int) -> int:
    """`conv_id`, or a KvchatError (exit 2) that says how to find a valid one."""
    try:
        store.get_sampling(conv_id)  # one small read: is the row there?
    except ConversationNotFoundError:
        raise KvchatError(
            f"There is no saved conversation {conv_id}; `chat --list` shows the saved ones."
        ) from None
    return conv_id


def export(
    store: Store, conv_id: int, fmt: ExportFormat, out: TextIO, *, all_branches: bool = False
) -> None:
    """Print the conversation: JSON with every branch, Markdown with the branch
    last shown or (`all_branches`) every branch."""
    check_exists(store, conv_id)
    conversation = store.get_conversation(conv_id)
    sampling = store.get_sampling(conv_id)
    text = export_text(conversation, sampling, fmt, all_branches=all_branches)
    # Imported conversations may hold escape sequences: never send them to a terminal.
    out.write(sanitize(text) if out.isatty() else text)


def import_file(store: Store, path: Path, out: TextIO) -> int:
    """Import a JSON conversation as a new one (all or nothing) and print its id."""
    conv, sampling = read_import_file(path)  # ImportFormatError: nothing was written
    conv_id = store.import_conversation(conv, sampling)
    print(conv_id, file=out)
    return conv_id
