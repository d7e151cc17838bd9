"""One tool server's life: start, initialize, list its tools, serve calls,
stop; over the official SDK's `mcp.ClientSession`.

The SDK is imported here and only here (with chat.tools.stdio), and this
module is imported only when a server is started, so a kvchat without tool
servers never loads it. Everything a server sends is untrusted: every
sentence made from it goes through chat.sanitize, and each fault becomes one
sentence naming the server (and the tool), never a traceback. The traceback,
when there is one, goes to the server's log file.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import traceback
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from chat import __version__
from chat.errors import ToolCallError
from chat.safe_files import human_limit
from chat.sanitize import sanitize, sanitize_line
from chat.tools.config import HttpServerConfig, ServerConfig, StdioServerConfig
from chat.tools.http import CONNECT_TIMEOUT_S, HttpTransport
from chat.tools.limits import Limits
from chat.tools.results import ToolResult, result_text
from chat.tools.schemas import schema_problem
from chat.tools.status import ServerState, ServerStatus, ToolInfo
from chat.tools.stdio import StartError, StdioTransport
from chat.tools.tool_list_guard import ToolListGuard, guarded

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}\Z")
"""Tool names as the MCP specification allows them."""
DESCRIPTION_LIMIT = 16 * 1024
"""Characters of a tool's description: it is sent with every prompt."""
MAX_PAGES = 50
"""Pages of a server's tool list read (a server could page forever)."""


SDK_LOG_LIMIT = 1 << 20
_SDK_LOG_HANDLER = "kvchat: the SDK's log"


def keep_sdk_logs_in(folder: Path) -> None:
    """The SDK reports its own troubles through `logging` (a broken stream, a
    failed session end); without a handler Python prints those on stderr,
    where Textual draws. They go to `sdk.log` in `folder` instead (bounded),
    once per process."""
    logger = logging.getLogger("mcp")
    if any(handler.get_name() == _SDK_LOG_HANDLER for handler in logger.handlers):
        return
    handler: logging.Handler
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            folder / "sdk.log", maxBytes=SDK_LOG_LIMIT, backupCount=1, delay=True
        )
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    except OSError:
        handler = logging.NullHandler()
    handler.set_name(_SDK_LOG_HANDLER)
    logger.addHandler(handler)
    logger.propagate = False


class ServerConnection:
    """One configured server. `run()` is its whole life (the manager runs it as
    a task); `stop()` ends it; `call_tool()` may be awaited from any task of
    the same event loop while it is ready. Each change of its status is
    passed to `on_change`."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        environ: Mapping[str, str],
        limits: Limits,
        log_dir: Path,
        on_change: Callable[[ServerStatus], None],
    ) -> None:
        self.status = ServerStatus(config)
        self._environ = environ
        self._limits = limits
        self._log_path = log_dir / f"{config.name}.log"
        self._on_change = on_change
        self._stop = anyio.Event()
        self._session: ClientSession | None = None
        self._stdio: StdioTransport | None = None
        self._http: HttpTransport | None = None
        # What `_fail` was told: a call refused after it says so in a sentence of its own.
        self._failed_reason = ""

    @property
    def name(self) -> str:
        return self.status.name

    def stop(self) -> None:
        self._stop.set()

    def _publish(self, **changes: Any) -> None:
        self.status = replace(self.status, **changes)
        self._on_change(self.status)

    def _fail(self, reason: str) -> None:
        """FAILED, with "The tool server 'x' <reason>." as the problem."""
        self._failed_reason = reason
        self._publish(state=ServerState.FAILED, problem=self._sentence(reason), pid=None)

    def _sentence(self, reason: str) -> str:
        return f"The tool server '{self.name}' {reason}."

    async def run(self) -> None:
        if self.status.config.disabled:
            self._publish(state=ServerState.STOPPED, problem="Disabled in the tool server file.")
            return
        if self._stop.is_set():
            self._publish(state=ServerState.STOPPED, problem=None)
            return
        self._publish(state=ServerState.STARTING, problem=None)
        try:
            async with AsyncExitStack() as stack:
                session = await self._start(stack)
                if session is None:
                    return
                self._session = session
                if await self._ended_before_stop():
                    # Said before the shutdown below, which may take a moment.
                    self._session = None
                    self._fail(self._end_reason())
        except StartError as error:
            self._fail(f"cannot start: {error}")
        except Exception as error:
            self._log_traceback()
            if self.status.state is not ServerState.FAILED:  # else: said already, when it ended
                self._fail(self._failure_reason(error))
        finally:
            self._session = None
            if self.status.state in (ServerState.STARTING, ServerState.READY):
                self._publish(state=ServerState.STOPPED, problem=None, pid=None)

    async def _start(self, stack: AsyncExitStack) -> ClientSession | None:
        """Connect, then initialize and list the tools within the start
        timeout: READY, or FAILED with why (None)."""
        # Entered outside the timeout's scope: a cancel scope must not end
        # while the task groups opened inside it (the transport's, the
        # session's) still run. Entering them does not wait on the server.
        read, write = await stack.enter_async_context(self._streams())
        read, write, guard = await stack.enter_async_context(guarded(read, write))
        if self._stdio is not None:
            self._publish(pid=self._stdio.pid)
        session = await stack.enter_async_context(
            ClientSession(
                read,
                write,
                client_info=mcp_types.Implementation(name="kvchat", version=__version__),
            )
        )
        limit = self._limits.start_timeout_s
        started: list[Any] = []
        with anyio.move_on_after(limit):
            # Each request also ends when the server does (its stdout closes),
            # so a server that exits at start is named at once.
            result = await self._unless_ended(session.initialize)
            if result is None:
                self._not_started()
                return None
            tools = await self._unless_ended(lambda: self._list_tools(session, guard))
            if tools is None:
                self._not_started()
                return None
            started = [result, tools]
        if not started:
            self._fail(self._timeout_reason(limit))
            return None
        result, tools = started
        self._publish(
            state=ServerState.READY,
            tools=tools,
            server_name=sanitize_line(result.server_info.name)[:128],
        )
        return session

    def _not_started(self) -> None:
        """The start ended early: the server ended (FAILED), or kvchat is
        stopping it (STOPPED, set by `run`)."""
        if not self._stop.is_set():
            self._fail(self._end_reason(starting=True))

    @asynccontextmanager
    async def _streams(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.status.config
        if isinstance(config, StdioServerConfig):
            self._stdio = StdioTransport(
                config, self._environ, self._log_path, message_limit=self._limits.message_bytes
            )
            async with self._stdio.open() as pipes:
                yield pipes
            return
        assert isinstance(config, HttpServerConfig)
        self._http = HttpTransport(
            config,
            self._environ,
            message_limit=self._limits.message_bytes,
            read_timeout_s=self._limits.call_timeout_s + CONNECT_TIMEOUT_S,
        )
        async with self._http.open() as streams:
            yield streams

    def _ended(self) -> anyio.Event | None:
        """Set when the server has ended by itself: its process, or the connection."""
        if self._stdio is not None:
            return self._stdio.ended
        return self._http.ended if self._http is not None else None

    async def _unless_ended(self, request: Callable[[], Any]) -> Any:
        """`await request()`, or None as soon as the server has ended or is
        being stopped (a quit never waits for a start or a call). What the
        request raises is raised as it is (not in a group)."""
        outcome: list[Any] = []
        failure: list[Exception] = []
        async with anyio.create_task_group() as tasks:

            async def ask() -> None:
                try:
                    outcome.append(await request())
                except Exception as error:
                    failure.append(error)
                finally:
                    tasks.cancel_scope.cancel()

            async def watch(event: anyio.Event) -> None:
                await event.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(ask)
            tasks.start_soon(watch, self._stop)
            ended = self._ended()
            if ended is not None:
                tasks.start_soon(watch, ended)
        if failure:
            raise failure[0]
        return outcome[0] if outcome else None

    async def _ended_before_stop(self) -> bool:
        """Wait until `stop()`, or until the server ends by itself (True)."""
        ended: list[bool] = []
        async with anyio.create_task_group() as tasks:

            async def wait_for(event: anyio.Event, by_itself: bool) -> None:
                await event.wait()
                ended.append(by_itself)
                tasks.cancel_scope.cancel()

            tasks.start_soon(wait_for, self._stop, False)
            end = self._ended()
            if end is not None:
                tasks.start_soon(wait_for, end, True)
        return bool(ended and ended[0])

    async def _list_tools(
        self, session: ClientSession, guard: ToolListGuard
    ) -> tuple[ToolInfo, ...]:
        tools: list[ToolInfo] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            listing = await session.list_tools(params=params)
            for tool in listing.tools:
                if len(tools) == self._limits.max_tools:
                    return tuple(tools)
                tools.append(_tool_info(tool, seen, guard.broken.get(tool.name)))
            cursor = listing.next_cursor
            if not cursor:
                break
        return tuple(tools)

    async def call_tool(
        self, tool: str, arguments: Mapping[str, Any], timeout: float | None = None
    ) -> ToolResult:
        """The tool's result; ToolCallError (one sentence) when there is none.
        Cancelling the awaiting task cancels the MCP request (the SDK sends
        `notifications/cancelled`), and so does the timeout."""
        shown_tool = sanitize_line(tool)[:128]
        session = self._session
        if session is None or self.status.state is not ServerState.READY:
            raise ToolCallError(self._sentence(self._not_ready_words(shown_tool)))
        info = self.status.tool(tool)
        if info is None:
            raise ToolCallError(self._sentence(f"has no tool '{shown_tool}'"))
        if info.problem is not None:
            raise ToolCallError(
                f"The tool '{shown_tool}' of the tool server '{self.name}' cannot be used: "
                f"{info.problem}."
            )
        limit = self._limits.call_timeout_s if timeout is None else timeout
        if self._http is not None:
            self._http.http_error = None
            self._http.too_large = False
        try:
            result = await self._unless_ended(
                lambda: session.call_tool(tool, dict(arguments), read_timeout_seconds=limit)
            )
        except MCPError as error:
            if error.code == mcp_types.REQUEST_TIMEOUT:
                raise ToolCallError(
                    self._sentence(
                        f"did not answer the call to '{shown_tool}' within {_seconds(limit)}: "
                        "the call was cancelled"
                    )
                ) from None
            if error.code == mcp_types.CONNECTION_CLOSED:
                raise ToolCallError(self._during_call(shown_tool)) from None
            if self._http is not None and self._http.too_large:
                raise ToolCallError(
                    self._sentence(f"{self._http.too_large_words()}, for '{shown_tool}'")
                ) from None
            why = _short(error.message)
            if self._http is not None and self._http.http_error is not None:
                why = f"it answered {self._http.refusal_words()}"
            raise ToolCallError(
                self._sentence(f"refused the call to '{shown_tool}': {why}")
            ) from None
        except ValidationError as error:
            raise ToolCallError(
                self._sentence(
                    f"answered the call to '{shown_tool}' with something that is not "
                    f"an MCP result ({_validation_words(error)})"
                )
            ) from None
        except (httpx2.HTTPError, OSError) as error:
            raise ToolCallError(
                self._sentence(f"could not be reached for '{shown_tool}': {_short(str(error))}")
            ) from None
        if result is None:
            raise ToolCallError(self._during_call(shown_tool))
        return result_text(result, self._limits.result_bytes)

    def _during_call(self, tool: str) -> str:
        if self._stop.is_set() and not self._ended_by_itself():
            return self._sentence(f"was stopped during the call to '{tool}' (kvchat is closing)")
        return self._sentence(f"{self._end_words()} during the call to '{tool}'")

    def _ended_by_itself(self) -> bool:
        ended = self._ended()
        return ended is not None and ended.is_set()

    def _not_ready_words(self, tool: str) -> str:
        """Why a call was not made, to follow the server's name: what ended
        it, when it failed (its problem is a sentence of its own, not to be
        nested in this one), else the state it is in."""
        if self.status.state is ServerState.FAILED and self._failed_reason:
            return f"{self._failed_reason}, so the call to '{tool}' was not made"
        return f"is not ready (it is {self.status.state.value})"

    def _end_words(self) -> str:
        stdio = self._stdio
        if stdio is None:
            lost = self._http.lost if self._http is not None else None
            return lost or "closed the connection"
        if stdio.failure is not None:
            return f"{stdio.failure}, so kvchat stopped it"
        return stdio.exit_text()

    def _end_reason(self, *, starting: bool = False) -> str:
        words = self._end_words()
        return f"{words} before it was ready" if starting else words

    def _timeout_reason(self, limit: float) -> str:
        reason = f"did not answer within {_seconds(limit)} of starting"
        stdio = self._stdio
        if stdio is not None and stdio.garbage_lines:
            lines = "line that is" if stdio.garbage_lines == 1 else "lines that are"
            reason += (
                f"; it wrote {stdio.garbage_lines} {lines} not MCP on stdout, "
                f"the first: {stdio.first_garbage}"
            )
        return reason

    def _failure_reason(self, error: BaseException) -> str:
        """Words for what went wrong while starting or running."""
        found = _first(error, (StartError, ValidationError, MCPError, httpx2.HTTPError, OSError))
        if isinstance(found, StartError):
            return f"cannot start: {found}"
        if isinstance(found, ValidationError):
            return f"answered with something that is not MCP ({_validation_words(found)})"
        if isinstance(found, MCPError):
            if found.code == mcp_types.CONNECTION_CLOSED:
                return self._end_reason(starting=self.status.state is ServerState.STARTING)
            if self._http is not None and self._http.http_error is not None:
                return f"refused to start: it answered {self._http.refusal_words()}"
            return f"refused to start: {_short(found.message)}"
        if isinstance(found, httpx2.HTTPStatusError):
            return (
                f"at {sanitize_line(found.request.url.host or '')} answered "
                f"HTTP {found.response.status_code}"
            )
        if isinstance(found, (httpx2.HTTPError, OSError)):
            where = f" at {self.status.config.describe()}" if self._http is not None else ""
            why = _short(str(found) or type(found).__name__)
            return f"cannot be reached{where}: {why[:1].lower()}{why[1:]}"
        return f"failed: {_short(str(error) or type(error).__name__)}"

    def _log_traceback(self) -> None:
        """The details of an unexpected failure, for whoever reads the log."""
        try:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self._log_path, "a", encoding="utf-8", errors="replace") as log:
                log.write("\n[kvchat] " + "".join(traceback.format_exc()))
        except OSError:
            pass


def _tool_info(tool: Any, seen: set[str], broken: str | None) -> ToolInfo:
    """A listed tool as kvchat keeps it: its name safe to show, and why it
    cannot be used, if it cannot (`broken`: its entry was not valid MCP)."""
    raw_name = str(tool.name)
    description = sanitize(str(tool.description or ""))
    problem = broken or schema_problem(tool.input_schema)
    if not TOOL_NAME.match(raw_name):
        name = sanitize_line(raw_name)[:128] or "?"
        problem = "its name is not a valid MCP tool name"
    else:
        name = raw_name
    if name in seen:
        problem = "another tool of this server has the same name"
    seen.add(name)
    if len(description) > DESCRIPTION_LIMIT:
        problem = problem or f"its description is longer than {human_limit(DESCRIPTION_LIMIT)}"
        description = description[:DESCRIPTION_LIMIT]
    return ToolInfo(name, description, dict(tool.input_schema), problem)


def _first(
    error: BaseException, kinds: tuple[type[BaseException], ...], depth: int = 0
) -> BaseException | None:
    """`error`, or the first of the errors it groups (anyio's task groups raise
    groups) or was caused by, that is one of `kinds`."""
    if isinstance(error, kinds):
        return error
    if depth > 8:
        return None
    for inner in getattr(error, "exceptions", ()):
        found = _first(inner, kinds, depth + 1)
        if found is not None:
            return found
    cause = error.__cause__ or error.__context__
    return _first(cause, kinds, depth + 1) if cause is not None else None


def _validation_words(error: ValidationError) -> str:
    errors = error.errors()
    if not errors:
        return "it does not validate"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the top"
    return _short(f"{where}: {first.get('msg', 'invalid')}")


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _short(text: str) -> str:
    shown = sanitize_line(text)
    return shown if len(shown) <= 200 else shown[:197] + "..."
