"""Chats in SQLite (app.storage): what is saved, and that nothing is lost to a lock, a
read-only folder, a full disk, a newer version's file, a half-done edit or a second window;
only a really damaged file is moved aside, and named."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from app import storage as storage_module
from app.storage import SCHEMA_VERSION, Storage, StorageError


def test_storage_crud_search_and_wal(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    assert db.journal_mode() == "wal" and db.recovery_message is None
    a = db.create_conversation("Fish facts", "Be brief.")
    b = db.create_conversation("Other")
    u = db.add_message(a, "user", "Tell me about salmon")
    db.add_message(a, "assistant", "Salmon swim upstream.", {"tokens": 4, "tau_mean": 1.5})
    db.add_message(a, "user", "More?")
    assert [c.id for c in db.list_conversations("salmon")] == [a]
    assert [c.id for c in db.list_conversations("other")] == [b]
    assert db.list_conversations("100%") == []  # LIKE wildcards are escaped
    db.delete_messages_after(a, u)
    msgs = db.messages(a)
    assert [m.content for m in msgs] == ["Tell me about salmon"]
    db.rename_conversation(a, "Salmon")
    assert db.conversation(a).title == "Salmon" and db.conversation(a).system_prompt == "Be brief."
    db.delete_conversation(a)
    assert db.messages(a) == [] and db.conversation(a) is None
    db.close()


def test_damaged_database_is_moved_aside(tmp_path):
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    db = Storage(path)
    assert db.recovery_message and "damaged" in db.recovery_message
    moved = list(tmp_path.glob("chats.corrupt-*.sqlite3"))
    assert len(moved) == 1 and moved[0].read_bytes().startswith(b"this is not")
    assert str(moved[0]) in db.recovery_message  # the person is told where it went
    conv = db.create_conversation()
    db.add_message(conv, "user", "still works")
    assert db.messages(conv)[0].content == "still works"
    db.close()


def test_mangled_stats_json_does_not_hide_the_message(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    conv = db.create_conversation()
    mid = db.add_message(conv, "assistant", "hello", {"tokens": 1})
    db.conn.execute("UPDATE messages SET stats_json = '{oops' WHERE id = ?", (mid,))
    assert db.message(mid).content == "hello" and db.message(mid).stats is None
    db.close()
    with sqlite3.connect(tmp_path / "chats.sqlite3") as raw:  # a second reader sees it: on disk
        assert raw.execute("SELECT content FROM messages").fetchone()[0] == "hello"


def _saved_chat(path) -> int:
    db = Storage(path)
    conv = db.create_conversation("Kept")
    db.add_message(conv, "user", "remember me")
    db.close()
    return conv


def _hold_lock(path, seconds: float) -> subprocess.Popen:
    """Another process (a second app window, a backup tool) holding the database's write lock
    in exclusive locking mode; returns once the lock is held."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE')\n"
        'c.execute("UPDATE conversations SET title = title")\n'
        "print('locked', flush=True); time.sleep(float(sys.argv[2])); c.execute('COMMIT')\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "locked"
    return child


def _nothing_moved_aside(folder) -> bool:
    return not list(folder.glob("*corrupt*"))


def test_a_database_locked_for_a_while_is_waited_for_and_every_chat_kept(tmp_path):
    """Locked by another process for 6 s (past sqlite3's default 5 s wait): the app waits and
    opens the same file; it used to call it damaged and move it aside."""
    path = tmp_path / "chats.sqlite3"
    conv = _saved_chat(path)
    child = _hold_lock(path, 6.0)
    db = Storage(path)
    child.wait(timeout=30)
    assert db.recovery_message is None and _nothing_moved_aside(tmp_path)
    assert [m.content for m in db.messages(conv)] == ["remember me"]
    db.add_message(conv, "assistant", "still here")
    db.close()


def test_a_lock_held_past_the_wait_leaves_the_file_alone(tmp_path, monkeypatch):
    path = tmp_path / "chats.sqlite3"
    conv = _saved_chat(path)
    monkeypatch.setattr(storage_module, "BUSY_TIMEOUT_S", 0.5)
    child = _hold_lock(path, 4.0)
    db = Storage(path)
    assert "locked" in db.recovery_message and "nothing on disk was changed" in db.recovery_message
    db.add_message(db.create_conversation(), "user", "this session only")  # still usable
    db.close()
    child.wait(timeout=30)
    assert _nothing_moved_aside(tmp_path)
    again = Storage(path)
    assert again.recovery_message is None
    assert [m.content for m in again.messages(conv)] == ["remember me"]
    again.close()


def test_a_read_only_database_is_shown_from_memory_and_not_touched(tmp_path, monkeypatch):
    """A read-only folder, as SQLite sees it (this test may run as root, whom file modes do
    not stop): the file opened read-only answers writes with SQLITE_READONLY."""
    path = tmp_path / "chats.sqlite3"
    conv = _saved_chat(path)
    before = path.read_bytes()
    real_connect = sqlite3.connect

    def read_only(database, *args, **kwargs):
        if str(database) == str(path):
            kwargs["uri"] = True
            database = path.resolve().as_uri() + "?mode=ro"
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(storage_module.sqlite3, "connect", read_only)
    db = Storage(path)
    assert "read-only" in db.recovery_message
    assert [m.content for m in db.messages(conv)] == ["remember me"]  # the chats are shown
    db.add_message(conv, "assistant", "kept in memory")
    db.close()
    assert _nothing_moved_aside(tmp_path) and path.read_bytes() == before


def test_a_full_disk_shows_an_error_and_loses_nothing_saved(tmp_path):
    path = tmp_path / "chats.sqlite3"
    conv = _saved_chat(path)
    db = Storage(path)
    pages = db.conn.execute("PRAGMA page_count").fetchone()[0]
    db.conn.execute(f"PRAGMA max_page_count={pages}")  # SQLite's own SQLITE_FULL from here on
    with pytest.raises(StorageError, match="full"):
        db.add_message(conv, "assistant", "x" * 200_000)
    db.close()
    again = Storage(path)
    assert [m.content for m in again.messages(conv)] == ["remember me"]
    assert again.conversation(conv).title == "Kept" and _nothing_moved_aside(tmp_path)
    again.close()


def test_a_database_from_a_newer_version_is_refused_and_left_as_it_is(tmp_path):
    path = tmp_path / "chats.sqlite3"
    _saved_chat(path)
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db = Storage(path)
    assert "newer HyFlash Chat" in db.recovery_message and db.list_conversations() == []
    db.close()
    with sqlite3.connect(path) as raw:  # not re-stamped as this version's
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert _nothing_moved_aside(tmp_path)


def test_edit_and_resend_lands_whole_or_not_at_all(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    conv = db.create_conversation()
    first = db.add_message(conv, "user", "first question")
    db.add_message(conv, "assistant", "first answer")
    db.conn.execute(
        "CREATE TRIGGER no_delete BEFORE DELETE ON messages BEGIN SELECT RAISE(ABORT, 'disk "
        "I/O error'); END"
    )  # the second statement of the edit fails
    with pytest.raises(StorageError):
        db.add_user_message(conv, "edited question", replaces=first)
    assert [m.content for m in db.messages(conv)] == ["first question", "first answer"]
    db.close()


def test_two_app_windows_share_one_database_without_losing_a_chat(tmp_path):
    path = tmp_path / "chats.sqlite3"
    first, second = Storage(path), Storage(path)
    a = first.create_conversation("from the first window")
    b = second.create_conversation("from the second window")
    held = threading.Event()

    def write_slowly():  # the first window saving while the second one saves too
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (conversation_id, role, content, created_at) "
            "VALUES (?, 'user', 'slow', 0)",
            (a,),
        )
        held.set()
        time.sleep(1.0)
        conn.execute("COMMIT")
        conn.close()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    held.wait(10)
    second.add_message(b, "user", "waited for the lock")
    writer.join()
    for db in (first, second):
        titles = {c.title for c in db.list_conversations()}
        assert titles == {"from the first window", "from the second window"}
        assert [m.content for m in db.messages(a)] == ["slow"]
        assert [m.content for m in db.messages(b)] == ["waited for the lock"]
    first.close()
    second.close()
    assert _nothing_moved_aside(tmp_path)


_VERSION_1 = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')), content TEXT NOT NULL,
    stats_json TEXT, created_at REAL NOT NULL);
INSERT INTO conversations VALUES (1, 'Old chat', '', 0, 0);
INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 0);
INSERT INTO messages VALUES (2, 1, 'assistant', 'hi there', '{"tokens": 2}', 0);
PRAGMA user_version=1;
"""


def test_a_version_1_database_is_migrated_with_every_message_kept(tmp_path):
    path = tmp_path / "chats.sqlite3"
    with sqlite3.connect(path) as raw:
        raw.executescript(_VERSION_1)
    db = Storage(path)
    assert db.recovery_message is None
    assert [(m.content, m.state, m.unfinished) for m in db.messages(1)] == [
        ("hello", "done", False),
        ("hi there", "done", False),
    ]
    assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_an_answer_saved_as_it_streams_replaces_the_old_one_only_when_finished(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    conv = db.create_conversation()
    db.add_message(conv, "user", "question")
    old = db.add_message(conv, "assistant", "old answer", {"tokens": 2})
    new = db.begin_answer(conv, replaces=old)
    db.write_partial(new, "new ans")
    # a crash here: both are on disk, the new one unfinished and naming what it replaces
    again = Storage(tmp_path / "chats.sqlite3")
    rows = again.messages(conv)
    assert [(m.content, m.unfinished, m.replaces) for m in rows[1:]] == [
        ("old answer", False, None),
        ("new ans", True, old),
    ]
    again.close()
    db.finish_answer(new, "new answer", {"tokens": 3})
    rows = db.messages(conv)
    assert [(m.content, m.unfinished, m.replaces) for m in rows] == [
        ("question", False, None),
        ("new answer", False, None),
    ]
    assert rows[1].stats == {"tokens": 3}
    db.close()
