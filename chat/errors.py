"""Errors a user can cause, each with a message meant for people.

The UI shows them in a notification or an error panel; the CLI prints them to
stderr and exits with status 2. Anything that is not a `KvchatError` is a bug.
"""


class KvchatError(Exception):
    """Base class: `str(error)` is a complete sentence for the user."""


class ModelError(KvchatError):
    """A model file is missing, is not a GGUF, or failed to load."""


class ChatTemplateError(ModelError):
    """A model's chat template cannot be used: it failed or ran over a limit
    (chat.engine.chat_template). `reason` says why in a few words."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"The chat template of {model} {reason}.")


class PromptTooLongError(KvchatError):
    """The prompt does not fit in the model's context window."""


class EngineBusyError(KvchatError):
    """A reply is already being generated; one engine call runs at a time."""


class EngineClosedError(KvchatError):
    """The model was freed (kvchat is quitting, or another model replaced it)."""


class ConfigError(KvchatError):
    """A setting has a wrong type or a value out of range."""


class StoreError(KvchatError):
    """The conversation database cannot be used.

    `brief`: the same in a few words, for the status bar's lasting "not saving"
    mark (the folder or file and what is wrong with it)."""

    def __init__(self, message: str, brief: str | None = None) -> None:
        super().__init__(message)
        self.brief = brief or message


class ServerError(KvchatError):
    """A model server (llama-server, vLLM, Ollama, ...) could not be used.

    The message names the server's URL and what to do."""


class ServerRefusedError(ServerError):
    """The server answered a request with an error status (`status`)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachableError(ServerError):
    """Nothing answers at the URL, or the connection dropped or timed out."""


class ServerAuthError(ServerError):
    """The server refused the API key (401/403); the message names the variable to set."""


class UnknownServerModelError(ServerError):
    """The model asked for is not served there; `models` lists those that are."""

    def __init__(self, message: str, models: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.models = models


class ToolCallError(KvchatError):
    """A tool call gave no result: its server is not ready or died, the tool is
    unknown or unusable, the call timed out or was refused. The message names
    the server and the tool (chat.tools.connection)."""
