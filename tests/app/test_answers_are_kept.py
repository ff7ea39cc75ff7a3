"""Nothing the person has is lost to Regenerate or a crash (app.generation, app.storage): the
old answer stays until the new one is saved, and an answer is saved as it streams, so a
process killed mid-answer leaves it on disk, shown as unfinished on the next start. The real
window and model, offscreen."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from qt_helpers import app_dirs

from app.main_window import MainWindow

SETTINGS = {
    "n_ctx": 2048,
    "n_threads": 1,
    "max_tokens": 48,
    "temperature": 0.0,
    "drafter": "ngram",
    "theme": "light",
}
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm, with many details."


@pytest.fixture()
def window(qtbot, host, tmp_path, monkeypatch):
    app_dirs(tmp_path, monkeypatch, SETTINGS)
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=60000)
    return w


def _answered(qtbot, w: MainWindow, text: str) -> list:
    assert w.send_message(text)
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=90000)
    return w.storage.messages(w.chats.current)


def test_regenerate_stopped_before_its_first_token_keeps_the_old_answer(qtbot, window):
    before = _answered(qtbot, window, "Give me a fruit name.")
    window.regenerate()
    assert window.answers.stop()  # before any token has come
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    assert window.storage.messages(window.chats.current) == before
    assert [c.text for c in window.chat.messages] == [m.content for m in before]


def test_regenerate_that_fails_keeps_the_old_answer(qtbot, window, host):
    before = _answered(qtbot, window, "Give me a fruit name.")
    window.regenerate()
    qtbot.waitUntil(
        lambda: bool(window.answers.active and window.answers.active.text), timeout=60000
    )
    request = window.answers.active.request.id
    done = []
    host.worker.finished.connect(lambda rid, _fin: done.append(rid))
    host.worker.error.emit(request, "the model stopped answering", "error")  # as a crash says
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=10000)
    assert window.storage.messages(window.chats.current) == before
    assert window.chat.messages[-1].text == before[-1].content
    qtbot.waitUntil(lambda: request in done, timeout=90000)  # the worker is free again


def test_a_regenerated_answer_replaces_the_old_one_once_saved(qtbot, window):
    before = _answered(qtbot, window, "Give me a fruit name.")
    window.regenerate()
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    after = window.storage.messages(window.chats.current)
    assert [m.role for m in after] == ["user", "assistant"] and after[0] == before[0]
    assert after[1].id != before[1].id and not after[1].unfinished


_CHILD = """
import sys
from PySide6.QtWidgets import QApplication
from app.main_window import MainWindow
app = QApplication([])
w = MainWindow()
w.show()
def send():
    if w.engine_link.info is None:
        return
    timer.stop()
    w.send_message(sys.argv[1])
from PySide6.QtCore import QTimer
timer = QTimer()
timer.timeout.connect(send)
timer.start(100)
app.exec()
"""


def test_an_answer_cut_off_by_a_killed_app_is_there_and_marked_unfinished(
    qtbot, tmp_path, monkeypatch, host
):
    _config, data = app_dirs(tmp_path, monkeypatch, {**SETTINGS, "max_tokens": 400})
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, LONG_PROMPT], env=env)
    db = data / "chats.sqlite3"
    partial = ""
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(partial) < 40:
            time.sleep(0.5)
            if db.exists():
                with sqlite3.connect(db) as raw:
                    row = raw.execute(
                        "SELECT content FROM messages WHERE role = 'assistant' AND state = "
                        "'writing'"
                    ).fetchone()
                partial = row[0] if row else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert len(partial) >= 40, "the answer was not saved while it streamed"
    w = MainWindow(host=host)  # the next start
    qtbot.addWidget(w)
    w.open_conversation(w.storage.list_conversations()[0].id)
    saved = w.storage.messages(w.chats.current)
    assert saved[-1].unfinished and saved[-1].content.startswith(partial)
    card = w.chat.messages[-1]
    assert card.text == saved[-1].content and "unfinished" in card.status_label.text()
