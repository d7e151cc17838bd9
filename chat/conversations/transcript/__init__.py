"""Export a conversation as Markdown or JSON, and import one from JSON.

The JSON is OpenAI-style (`{"messages": [{"role", "content"}, ...]}`, system
prompt first: the branch shown) so other tools can read it, plus a `"kvchat"`
object with what only kvchat knows: title, times, model (and, for a
conversation made with a model server, its kind and URL: never a key or a
password), sampling settings, and the whole tree (`"tree"`: every message of
every branch, oldest first, each with an id and its parent's id, its stats,
sampled tokens and attached files; `"shown"`: the id of the last message of the branch shown).
A reasoning model's reply carries its thinking apart from its answer, as
OpenAI-style APIs do (`"reasoning_content"`), in both. A reply that called
tools is, in `"messages"`, its steps as OpenAI-style messages (assistant
messages with `"tool_calls"`, `"tool"` messages with the results) before its
answer, and in the tree one entry with its steps (`"tool_steps"`).
Import also takes kvchat's earlier format (one branch with per-message
metadata), plain OpenAI-style files and bare lists of messages, with the
thinking under the names servers give it (`json_import.THINKING_FIELDS`),
and tool calls and results (each tool turn made one reply again).
Markdown is for people: the branch shown, or every branch one after the
other; a reply's thinking and each tool call folded before its answer.

Here: `markdown`, `json_export`, `json_import` (no I/O besides
`read_import_file`; the store saves what `parse_import` returns) and `files`,
which writes an export to a new file (Ctrl+E in the app, `chat --export`).
"""

from chat.conversations.transcript.files import (
    UNSAVED_PREFIX,
    ExportFormat,
    default_folder,
    export_conversation,
    export_elsewhere,
    export_text,
    file_stem,
    rescue_folders,
    write_new_file,
)
from chat.conversations.transcript.json_export import FORMAT_VERSION, to_json
from chat.conversations.transcript.json_import import (
    MAX_IMPORT_BYTES,
    ImportFormatError,
    parse_import,
    read_import_file,
)
from chat.conversations.transcript.markdown import to_markdown

__all__ = [
    "FORMAT_VERSION",
    "MAX_IMPORT_BYTES",
    "UNSAVED_PREFIX",
    "ExportFormat",
    "ImportFormatError",
    "default_folder",
    "export_conversation",
    "export_elsewhere",
    "export_text",
    "file_stem",
    "parse_import",
    "read_import_file",
    "rescue_folders",
    "to_json",
    "to_markdown",
    "write_new_file",
]
