"""Conversations and messages in SQLite (WAL) under the user data dir, and the format of the
stats record stored with each answer.

Every change commits at once, a change of several rows in one transaction, so a finished or
stopped answer is on disk the moment it is saved. Only real damage (SQLite's CORRUPT or
NOTADB, or a failed integrity check) moves a database aside, with a timestamp, for a fresh
one. A database that is busy waits for it (another app window, a backup); one that cannot be
used now (locked too long, read-only, a full disk, an I/O error) or was written by a newer
version is left as it is, and the chats of this session are kept in memory. Either way
`recovery_message` says what happened, for the person.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.markdown import Run
from app.paths import data_dir, move_aside

if TYPE_CHECKING:
    from engine.events import EngineInfo, Finished

DB_FILE = "chats.sqlite3"
SCHEMA_VERSION = 2  # PRAGMA user_version; 0 is a file this app has just created
BUSY_TIMEOUT_S = 10.0  # how long a locked database is waited for before it is left alone
_DAMAGE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")  # the only errors that mean the file is damaged
_WHY_UNUSABLE = {
    "SQLITE_BUSY": "another program or HyFlash Chat window holds it locked",
    "SQLITE_LOCKED": "another program or HyFlash Chat window holds it locked",
    "SQLITE_READONLY": "its folder or file is read-only",
    "SQLITE_PERM": "its folder or file may not be written",
    "SQLITE_CANTOPEN": "its folder cannot be written",
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "the disk reported an error",
}
DEFAULT_TITLE = "New chat"
TITLE_CHARS = 48  # a new chat is named after the start of its first message

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    stats_json TEXT,
    created_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'done',
    replaces INTEGER
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, id);
"""


# version -> the statements that bring a database of that version to the next one
_MIGRATIONS = {
    # answers saved as they stream ('writing' until finished), and regenerated answers that
    # replace the old one only once they are saved
    1: (
        "ALTER TABLE messages ADD COLUMN state TEXT NOT NULL DEFAULT 'done'",
        "ALTER TABLE messages ADD COLUMN replaces INTEGER",
    ),
}
WRITING = "writing"  # an answer being written, or one a crash or an error left unfinished
_MESSAGE_COLUMNS = "id, conversation_id, role, content, stats_json, created_at, state, replaces"


class StorageError(Exception):
    """A database problem, with a message meant for the user."""


class _Damaged(Exception):
    """The file is not a sound SQLite database (a failed integrity check)."""


class _Unusable(Exception):
    """The file is sound but cannot be used by this version now; the message says why."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: dict | None
    created_at: float
    state: str = "done"
    replaces: int | None = None  # the answer this one regenerates (until it is finished)

    @property
    def unfinished(self) -> bool:
        return self.state == WRITING


class Storage:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / DB_FILE
        self.recovery_message: str | None = None
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._open()
        except _Damaged as exc:
            self._recover(exc)
        except _Unusable as exc:
            self._in_memory(str(exc), copy=False)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "").startswith(_DAMAGE):
                self._recover(exc)
            else:
                self._in_memory(_unusable(self.path, exc), copy=True)

    # ----- opening and recovery ---------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise _Unusable(f"{self.path} cannot be shared safely (journal mode {mode})")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise _Damaged(f"integrity check failed: {check}")
            self._check_schema(conn)
            with _transaction(conn):  # may it be written? (read-only, or locked too long)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Create the tables in a new file; refuse one a newer version wrote (its tables may
        mean something this version would break)."""
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise _Unusable(
                f"The chats in {self.path} were saved by a newer HyFlash Chat (database "
                f"version {version}; this one reads version {SCHEMA_VERSION}): update the app "
                "to see them."
            )
        if version < SCHEMA_VERSION:
            with _transaction(conn):
                if version == 0:  # a new file: the tables as this version makes them
                    _create_tables(conn)
                for old in range(version or SCHEMA_VERSION, SCHEMA_VERSION):
                    for statement in _MIGRATIONS[old]:
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _recover(self, exc: Exception) -> None:
        """Move the damaged file (and its WAL/SHM companions) aside and start a fresh one."""
        moved = None
        try:
            if self.path.exists():
                moved = move_aside(self.path)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists() and moved is not None:
                    side.replace(moved.with_name(moved.name + suffix))
        except OSError as move_exc:
            raise StorageError(
                f"The chat database is damaged and cannot be moved: {move_exc}"
            ) from exc
        self._conn = self._open()
        where = f"It was moved to {moved}" if moved else "It was removed"
        self.recovery_message = (
            f"The chat database was damaged ({exc}). {where}, and a new, empty one was started."
        )

    def _in_memory(self, why: str, copy: bool) -> None:
        """Keep this session's chats in memory, starting from a copy of the file's where it
        can be read (`copy`), and leave the file on disk as it is."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        try:
            if copy and self.path.exists():
                uri = self.path.resolve().as_uri() + "?mode=ro"
                with closing(sqlite3.connect(uri, uri=True, timeout=1.0)) as disk:
                    disk.backup(conn)
        except sqlite3.Error:
            pass  # unreadable too: this session starts empty
        conn.execute("PRAGMA foreign_keys=ON")
        _create_tables(conn)
        self._conn = conn
        self.recovery_message = (
            f"{why} Chats of this session are kept in memory only; nothing on disk was changed."
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError("The chat database is closed.")
        return self._conn

    def journal_mode(self) -> str:
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    @contextmanager
    def _changes(self) -> Iterator[None]:
        """The changes made inside land together or not at all (nested: the outermost)."""
        if self.conn.in_transaction:
            yield
            return
        try:
            with _transaction(self.conn):
                yield
        except sqlite3.Error as exc:
            raise StorageError(f"Saving chats failed: {exc}") from exc

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, args)
        except sqlite3.Error as exc:
            raise StorageError(f"Saving or reading chats failed: {exc}") from exc

    # ----- conversations ----------------------------------------------------------------------

    def create_conversation(self, title: str = DEFAULT_TITLE, system_prompt: str = "") -> int:
        now = time.time()
        cur = self._run(
            "INSERT INTO conversations (title, system_prompt, created_at, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (title, system_prompt, now, now),
        )
        return int(cur.lastrowid)

    def conversation(self, conv_id: int) -> Conversation | None:
        row = self._run(
            "SELECT id, title, system_prompt, created_at, updated_at FROM conversations "
            "WHERE id = ?",
            (conv_id,),
        ).fetchone()
        return Conversation(*row) if row else None

    def list_conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; `search` matches titles and message text (case-insensitive)."""
        sql = "SELECT id, title, system_prompt, created_at, updated_at FROM conversations"
        args: tuple = ()
        if search.strip():
            like = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%") + "%"
            like = like.replace("_", "\\_")
            sql += (
                " WHERE title LIKE ? ESCAPE '\\' OR id IN (SELECT conversation_id FROM messages"
                " WHERE content LIKE ? ESCAPE '\\')"
            )
            args = (like, like)
        sql += " ORDER BY updated_at DESC, id DESC"
        return [Conversation(*row) for row in self._run(sql, args).fetchall()]

    def rename_conversation(self, conv_id: int, title: str) -> None:
        self._run("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), conv_id))

    def set_system_prompt(self, conv_id: int, prompt: str) -> None:
        self._run("UPDATE conversations SET system_prompt = ? WHERE id = ?", (prompt, conv_id))

    def delete_conversation(self, conv_id: int) -> None:
        self._run("DELETE FROM conversations WHERE id = ?", (conv_id,))

    def _touch(self, conv_id: int) -> None:
        self._run("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conv_id))

    # ----- messages ---------------------------------------------------------------------------

    def add_message(self, conv_id: int, role: str, content: str, stats: dict | None = None) -> int:
        with self._changes():
            cur = self._run(
                "INSERT INTO messages (conversation_id, role, content, stats_json, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (conv_id, role, content, json.dumps(stats) if stats else None, time.time()),
            )
            self._touch(conv_id)
        return int(cur.lastrowid)

    def messages(self, conv_id: int) -> list[Message]:
        rows = self._run(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? ORDER BY id",
            (conv_id,),
        ).fetchall()
        return [_message(r) for r in rows]

    def message(self, message_id: int) -> Message | None:
        row = self._run(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        return _message(row) if row else None

    # ----- an answer, saved as it is written -------------------------------------------------

    def begin_answer(self, conv_id: int, replaces: int | None = None) -> int:
        """A row for an answer being written (its first text is about to be saved); with
        `replaces`, the answer it regenerates, which stays until this one is finished."""
        cur = self._run(
            "INSERT INTO messages (conversation_id, role, content, created_at, state, replaces) "
            "VALUES (?, 'assistant', '', ?, ?, ?)",
            (conv_id, time.time(), WRITING, replaces),
        )
        return int(cur.lastrowid)

    def write_partial(self, message_id: int, text: str) -> None:
        self._run("UPDATE messages SET content = ? WHERE id = ?", (text, message_id))

    def finish_answer(self, message_id: int, text: str, stats: dict | None) -> None:
        """The answer as finished (or stopped), with its stats, in place of the one it
        regenerates: both changes land together."""
        row = self.message(message_id)
        with self._changes():
            self._run(
                "UPDATE messages SET content = ?, stats_json = ?, state = 'done', replaces = NULL "
                "WHERE id = ?",
                (text, json.dumps(stats) if stats else None, message_id),
            )
            if row is not None and row.replaces is not None:
                self.delete_message(row.replaces)
            if row is not None:
                self._touch(row.conversation_id)

    def update_message(self, message_id: int, content: str) -> None:
        self._run("UPDATE messages SET content = ? WHERE id = ?", (content, message_id))

    def delete_message(self, message_id: int) -> None:
        self._run("DELETE FROM messages WHERE id = ?", (message_id,))

    def delete_messages_after(self, conv_id: int, message_id: int) -> None:
        """Drop every message that came after `message_id` (edit-and-resend)."""
        self._run(
            "DELETE FROM messages WHERE conversation_id = ? AND id > ?", (conv_id, message_id)
        )

    def add_user_message(self, conv_id: int, text: str, replaces: int | None = None) -> str | None:
        """Save `text` as the next user message of chat `conv_id`, or as the new text of the
        message `replaces` with everything after it dropped (edit and resend). A chat still
        called DEFAULT_TITLE is named after the message: returns that title, else None."""
        conv = self.conversation(conv_id)
        title = None
        if conv is not None and conv.title == DEFAULT_TITLE:
            first = text.splitlines()[0]
            title = first[:TITLE_CHARS] + ("…" if len(first) > TITLE_CHARS else "")
        with self._changes():
            if replaces is not None:
                self.update_message(replaces, text)
                self.delete_messages_after(conv_id, replaces)
            else:
                self.add_message(conv_id, "user", text)
            if title is not None:
                self.rename_conversation(conv_id, title)
        return title


def _unusable(path: Path, exc: sqlite3.DatabaseError) -> str:
    name = getattr(exc, "sqlite_errorname", "")
    why = next((w for code, w in _WHY_UNUSABLE.items() if name.startswith(code)), None)
    return f"The chat database {path} cannot be used now ({exc}{'; ' + why if why else ''})."


def _create_tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction: every statement in it lands, or none does."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:  # SQLite itself rolls back on some errors (a full disk)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _message(row: tuple) -> Message:
    return Message(row[0], row[1], row[2], row[3], _stats(row[4]), row[5], row[6], row[7])


def _stats(raw: str | None) -> dict | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None  # a mangled stats blob must not hide the message itself
    return value if isinstance(value, dict) else None


# ----- the stats record stored with an answer -----------------------------------------------


def answer_record(
    fin: Finished,
    steps: list[tuple[int, int]],
    runs: list[Run],
    info: EngineInfo | None,
) -> dict:
    """The stats JSON stored with an answer: totals, the last StepStats, per-step tau and
    block size (for the plot), and which text came from accepted drafts (for the tint)."""
    step = fin.stats.to_dict() if fin.stats else None
    return {
        "stop_reason": fin.stop_reason,
        "tokens": len(fin.token_ids),
        "tokens_per_s": step["tokens_per_s"] if step else 0.0,
        "tau_mean": step["tau_mean"] if step else 0.0,
        "ttft_s": step["ttft_s"] if step else 0.0,
        "elapsed_s": fin.elapsed_s,
        "prompt_tokens": fin.prompt_tokens,
        "model": info.model_id if info else None,
        "drafter": info.drafter if info else None,
        "backend": info.backend if info else None,
        "tau_steps": [committed for committed, _block in steps],
        "block_steps": [block for _committed, block in steps],
        # runs that do not spell the final text would tint the wrong characters: keep none
        "runs": compact_runs(runs) if "".join(t for t, _ in runs) == fin.text else None,
        "step": step,
    }


def compact_runs(runs: list[Run]) -> list[list[int]]:
    """Runs as [length, drafted] pairs: the text itself is already stored in the message."""
    return [[len(text), int(drafted)] for text, drafted in runs if text]


def expand_runs(text: str, compact: list | None) -> list[Run] | None:
    """The runs of `text` back from compact_runs, or None when they do not fit it."""
    if not compact:
        return None
    runs, pos = [], 0
    for item in compact:
        try:
            n, drafted = int(item[0]), bool(item[1])
        except (TypeError, ValueError, IndexError):
            return None
        runs.append((text[pos : pos + n], drafted))
        pos += n
    return runs if pos == len(text) else None
