"""The app's Local server switch on the real embedded model, offscreen: it serves the window's
engine over HTTP, API requests and window chats take turns on it, and the window's stats
panel follows an API request live."""

from __future__ import annotations

import socket
import threading
import time

import openai
import pytest
from openai import OpenAI
from PySide6.QtCore import Qt
from qt_helpers import app_dirs

from app.main_window import MainWindow
from app.settings import SettingsStore

SETTINGS = {
    "n_ctx": 2048,
    "n_threads": 1,
    "max_tokens": 16,
    "temperature": 0.0,
    "drafter": "ngram",
    "theme": "light",
    "server_port": 0,  # any free port
}


@pytest.fixture()
def window(qtbot, host, tmp_path, monkeypatch):
    app_dirs(tmp_path, monkeypatch, SETTINGS)
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=60000)
    yield w
    w.server.stop()


def stream_in_thread(url: str, model: str, max_tokens: int, out: dict) -> threading.Thread:
    def run() -> None:
        api = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        chunks = list(
            api.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "Write a short poem about the sea."}],
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        out["text"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        out["last"] = chunks[-1]
        out["done_at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_switch_serves_the_window_engine_with_live_stats_and_frees_the_port(qtbot, window, host):
    panel = window.open_server_panel()
    assert not window.server.running and panel.url.text() == "–"
    panel.switch.click()  # as a user flips it
    qtbot.waitUntil(lambda: window.server.running, timeout=10000)
    url = window.server.url
    assert url.startswith("http://127.0.0.1:") and panel.url.text() == url
    assert window.server_label.isVisibleTo(window) and url in window.server_label.text()
    assert SettingsStore().load()[0].server_enabled is True
    port = int(url.rsplit(":", 1)[1].split("/")[0])

    model = window.engine_link.info.model_id
    assert [m.id for m in OpenAI(base_url=url, api_key="x").models.list().data] == [model]

    live: list = []  # (request id, tokens) of each stats update the window got

    def on_stats(rid, update) -> None:
        live.append((rid, update.latest.tokens_generated))

    host.worker.stepStats.connect(on_stats)
    try:
        out: dict = {}
        client = stream_in_thread(url, model, 32, out)
        qtbot.waitUntil(lambda: window.answers.server_job is not None, timeout=60000)
        job_id = window.answers.server_job
        assert window.server_label.text().startswith("API busy")
        assert "Answering POST /v1/chat/completions" in panel.status.text()
        qtbot.waitUntil(lambda: "last" in out, timeout=90000)
        client.join(5)
        qtbot.waitUntil(lambda: window.answers.server_job is None, timeout=10000)
    finally:
        host.worker.stepStats.disconnect(on_stats)

    last = out["last"]
    assert out["text"] and last.usage.completion_tokens >= 1
    mine = [tokens for rid, tokens in live if rid == job_id]
    assert mine and mine[-1] == last.usage.completion_tokens, "the stats panel followed it"
    assert window.stats.tau_mean.value.text() == f"{last.hyflash['tau']:.2f}"
    assert window.stats.tokens.value.text() == str(last.usage.completion_tokens)
    assert panel.status.text() == "Idle" and url in window.server_label.text()
    qtbot.waitUntil(lambda: panel.log.count() >= 2, timeout=5000)
    line = panel.log.item(panel.log.count() - 1).text()
    assert "POST /v1/chat/completions  200" in line and "τ" in line

    panel.switch.click()  # as a user flips it
    assert not window.server.running and not window.server_label.isVisibleTo(window)
    assert SettingsStore().load()[0].server_enabled is False
    with pytest.raises(openai.APIConnectionError):
        OpenAI(base_url=url, api_key="x", max_retries=0, timeout=5).models.list()
    with socket.create_server(("127.0.0.1", port)):  # the port is free again
        pass


def test_window_chat_and_api_request_take_turns(qtbot, window, host):
    assert window.set_server_enabled(True, 0)
    url, model = window.server.url, window.engine_link.info.model_id
    stamps: dict[str, float] = {}

    def on_delta(rid, _runs) -> None:  # these run on the worker thread, at emit time
        if window.answers.active is not None and rid == window.answers.active.request.id:
            stamps.setdefault("window_first_text", time.monotonic())

    def on_api_end(_rid) -> None:
        stamps["api_end"] = time.monotonic()

    direct = Qt.ConnectionType.DirectConnection
    host.worker.textDelta.connect(on_delta, direct)
    host.worker.serverJobEnded.connect(on_api_end, direct)
    try:
        out: dict = {}
        client = stream_in_thread(url, model, 32, out)
        qtbot.waitUntil(lambda: window.answers.server_job is not None, timeout=60000)
        assert window.send_message("Say hello.")  # queued behind the API request
        assert window.answers.active.widget.status_label.text() == "waiting for the local server…"
        qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
        client.join(30)
    finally:
        host.worker.textDelta.disconnect(on_delta)
        host.worker.serverJobEnded.disconnect(on_api_end)
    assert out["text"] and window.answers.last_finished.stop_reason in ("eos", "length")
    # one engine, one queue: the window's answer began only after the API request ended
    assert stamps["window_first_text"] > stamps["api_end"]
    assert (
        window.storage.messages(window.chats.current)[-1].content
        == window.answers.last_finished.text
    )
    window.close()  # closing the window stops its server
    assert not window.server.running


def test_a_taken_port_is_reported_and_the_switch_stays_off(window):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        panel = window.open_server_panel()
        panel.port.setValue(port)
        panel.switch.click()
        assert not window.server.running and not panel.switch.isChecked()
        assert f"port {port}" in window.banner.text()
        assert SettingsStore().load()[0].server_enabled is False


def test_opening_the_server_to_the_network_takes_a_key_and_every_request_needs_it(window):
    panel = window.open_server_panel()
    assert not panel.lan.isChecked() and panel.key.text() == ""
    panel.lan.click()  # no key yet: one is made, and remembered with the choice
    key = panel.key.text()
    assert key.startswith("hf-") and len(key) > 20
    saved = SettingsStore().load()[0]
    assert (saved.server_lan, saved.server_key) == (True, key)
    panel.switch.click()
    assert window.server.running and window.server.server.host == "0.0.0.0"
    for field in (panel.lan, panel.key, panel.port):
        assert not field.isEnabled()  # the server runs as it was started
    url = window.server.url
    assert url.startswith("http://127.0.0.1:") and "open to the network" in panel.url.text()
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    models = OpenAI(base_url=url, api_key=key, max_retries=0).models.list()
    assert [m.id for m in models.data] == [window.engine_link.info.model_id]
    panel.switch.click()
    assert not window.server.running


def test_the_network_is_never_opened_without_a_key(window):
    panel = window.open_server_panel()
    panel.lan.click()
    panel.key.setText("")
    panel.key.editingFinished.emit()
    panel.switch.click()
    assert not window.server.running and not panel.switch.isChecked()
    assert "API key" in window.banner.text()
