"""The conversation database as a file: created private, looked at before
SQLite may write to it (not a database, damaged, another program's, from a
newer kvchat), SQLite's errors said in words, and moved aside when the user
gives it up.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from pathlib import Path

from chat import paths
from chat.conversations.schema import SCHEMA_VERSION, NewerSchemaError
from chat.errors import StoreError

BUSY_TIMEOUT_S = 5.0
"""How long a write waits for another kvchat process to finish its own."""

_SQLITE_MAGIC = b"SQLite format 3\x00"


class CorruptDatabaseError(StoreError):
    """The file is not a SQLite database, is damaged, or belongs to another program."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"The conversation database {path} cannot be read: {detail}. "
            "kvchat has not changed it. kvchat can move it aside "
            f"(renamed to {path.name}.corrupt-<date>) and start a new, empty database, "
            "or you can quit and restore the file from a backup."
        )


def create_file(path: Path) -> None:
    """Make the data folder (0700) and an empty database file (0600) if missing.

    The file is created before SQLite sees it so that it never exists, even for
    a moment, with wider permissions; SQLite gives -wal and -shm the same mode.
    """
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
            os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as error:
        problem = paths.folder_problem(path.parent, error)
        raise StoreError(
            f"kvchat cannot create its conversation database {path}: {problem}. "
            "Fix that, or set KVCHAT_DATA_DIR to another folder.",
            brief=problem,
        ) from error


def check_existing(path: Path, quick_check: bool) -> None:
    """Look at an existing file without changing it: raise if kvchat must not use it."""
    try:
        with open(path, "rb") as file:
            header = file.read(100)
    except OSError as error:
        raise StoreError(
            f"kvchat cannot read its conversation database {path}: {error.strerror}. "
            "Check the file's permissions."
        ) from error
    if not header:
        return  # empty: a new database (or one whose creation was interrupted)
    if not header.startswith(_SQLITE_MAGIC):
        raise CorruptDatabaseError(path, "it is not a SQLite database")
    # A read-only connection: nothing we do here can write to the file.
    uri = path.absolute().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as error:
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    try:
        # One read transaction, so one snapshot: read apart, another kvchat
        # creating the database in between (its tables and version are one
        # commit) showed tables without their version, and a healthy file was
        # called corrupt.
        conn.execute("BEGIN")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(path, version, SCHEMA_VERSION)
        if version == 0 and {t for t in tables if not t.startswith("sqlite_")}:
            raise CorruptDatabaseError(path, "it holds tables that kvchat did not create")
        if quick_check:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
            if problems != ["ok"]:
                raise CorruptDatabaseError(path, "; ".join(problems))
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise _busy_error(path) from error
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    except sqlite3.DatabaseError as error:
        raise _folder_fault(path) or CorruptDatabaseError(path, str(error)) from error
    finally:
        conn.close()


def _folder_fault(path: Path) -> StoreError | None:
    """Why SQLite could not open a sound database, when the cause is its folder.

    SQLite keeps `-wal` and `-shm` files beside the database even to read it, so
    a read-only or full folder makes a healthy file fail to open ("unable to open
    database file", "disk I/O error"): that must not be taken for damage.
    """
    try:
        with tempfile.TemporaryFile(dir=path.parent) as probe:
            probe.write(bytes(4096))  # a page: a full disk refuses it
            probe.flush()
            os.fsync(probe.fileno())
            return None
    except OSError as error:
        problem = paths.folder_problem(path.parent, error)
        return StoreError(
            f"kvchat cannot open its conversation database {path}: {problem}. "
            "The database itself is untouched.",
            brief=problem,
        )


def is_busy(error: sqlite3.Error) -> bool:
    name = getattr(error, "sqlite_errorname", "")  # Python 3.11+
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(error)


def _busy_error(path: Path) -> StoreError:
    return StoreError(
        f"The conversation database {path} stayed locked by another program for "
        f"{BUSY_TIMEOUT_S:g} seconds. Close other kvchat windows using it and try again."
    )


def translate(path: Path, error: sqlite3.DatabaseError) -> Exception:
    """A StoreError for what the user can fix; programming errors pass through."""
    if isinstance(error, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return error
    name = getattr(error, "sqlite_errorname", "")
    text = str(error)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text:
        return CorruptDatabaseError(path, text)
    if is_busy(error):
        return _busy_error(path)
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return StoreError(
            f"The disk holding {path} is full. Free some space and try again.",
            brief=f"the disk holding {path.parent} is full",
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return StoreError(
            f"kvchat cannot write to its conversation database {path}: the file or its "
            "folder is read-only. Make it writable, or set KVCHAT_DATA_DIR to another folder.",
            brief=f"{path.parent} is read-only",
        )
    return StoreError(
        f"kvchat cannot use its conversation database {path}: {text}. "
        "Check that the disk is present and that you may write to the file.",
        brief=f"{path}: {text}",
    )


def move_aside(path: Path) -> Path:
    """Rename a database the user agreed to give up, with its -wal and -shm.

    `x.db` becomes `x.db.corrupt-YYYYmmdd-HHMMSS` (and `...-wal`, `...-shm`, so
    SQLite still pairs them if someone opens the kept file). Returns the new path.
    Never overwrites: a numeric suffix is added if that name is taken.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while any(Path(f"{target}{s}").exists() for s in ("", "-wal", "-shm")):
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    try:
        for suffix in ("-wal", "-shm", ""):  # the main file last: it is what counts
            source = Path(f"{path}{suffix}")
            if source.exists():
                source.rename(f"{target}{suffix}")
    except OSError as error:
        raise StoreError(
            f"kvchat cannot rename {path} to {target}: {error.strerror}. "
            "Move or delete the file yourself, then start kvchat again."
        ) from error
    return target
