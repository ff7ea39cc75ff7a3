"""The main window on the real embedded model (no engine mocks), offscreen.

One EngineHost (worker thread + Engine) is loaded once for the module and shared by the
windows; each test gets fresh config/data dirs. Answers are short (max 48 tokens, n_ctx 2048,
one CPU thread so the UI thread keeps a core on a 2-core machine).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from qt_helpers import app_dirs

from app.loop_gaps import LoopGaps
from app.main_window import MainWindow
from app.settings import AppSettings, SettingsStore
from app.storage import Storage
from app.worker import EMIT_INTERVAL_S, STATS_INTERVAL_S

N_CTX = 2048  # the conftest host's n_ctx
SETTINGS = {
    "n_ctx": N_CTX,
    "n_threads": 1,
    "max_tokens": 48,
    "temperature": 0.0,
    "drafter": "ngram",
    "theme": "light",
}
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm, with many details."


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    return app_dirs(tmp_path, monkeypatch, SETTINGS)


@pytest.fixture()
def window(qtbot, host, dirs):
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=60000)
    return w


def answer(qtbot, w: MainWindow, text: str, timeout_ms: int = 90000):
    assert w.send_message(text)
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=timeout_ms)
    return w.answers.last_finished


def test_send_streams_answer_with_live_stats(qtbot, window, host):
    deltas, stats, emitted, stats_emitted = [], [], [], []
    host.worker.textDelta.connect(lambda rid, runs: deltas.append(runs))
    host.worker.stepStats.connect(lambda rid, update: stats.append(update))

    def stamp(_rid, _runs) -> None:  # runs on the worker thread, at emit time
        emitted.append(time.monotonic())

    def stamp_stats(_rid, _update) -> None:
        stats_emitted.append(time.monotonic())

    host.worker.textDelta.connect(stamp, Qt.ConnectionType.DirectConnection)
    host.worker.stepStats.connect(stamp_stats, Qt.ConnectionType.DirectConnection)
    try:
        fin = answer(qtbot, window, "Name three colours of the rainbow, with a sentence on each.")
    finally:
        host.worker.textDelta.disconnect(stamp)
        host.worker.stepStats.disconnect(stamp_stats)
    assert fin is not None and fin.stop_reason in ("eos", "length")
    assert len(deltas) >= 2, "the answer should arrive in pieces, not at once"
    assert stats and stats[-1].latest.tokens_generated == len(fin.token_ids)
    assert "".join(t for runs in deltas for t, _d in runs) == fin.text
    # coalesced: at most one update per EMIT_INTERVAL_S (the last flush, at Finished, may come
    # sooner)
    gaps = [b - a for a, b in zip(emitted[:-1], emitted[1:-1], strict=False)]
    assert gaps and min(gaps) >= 0.9 * EMIT_INTERVAL_S, gaps
    # the stats panel at its own, slower rate; every step still reaches the plot (below)
    stats_gaps = [b - a for a, b in zip(stats_emitted[:-1], stats_emitted[1:-1], strict=False)]
    assert all(g >= 0.9 * STATS_INTERVAL_S for g in stats_gaps), stats_gaps
    assert len(stats_emitted) < len(emitted), (len(stats_emitted), len(emitted))
    panel = window.stats
    assert panel.tau_mean.value.text() == f"{fin.stats.tau_mean:.2f}"
    assert panel.tau_step.value.text() != "–"
    assert "MB" in panel.kv_bar.value.text() and panel.kv_bar.bar.value() > 0
    assert "MB" in panel.draft_bar.value.text()
    assert len(panel.plot.committed) == fin.stats.step
    card = window.chat.messages[-1]
    assert card.role == "assistant" and card.text == fin.text
    assert "tok/s" in card.footer.text() and "τ" in card.footer.text()
    saved = window.storage.messages(window.chats.current)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[1].content == fin.text and saved[1].stats["tokens"] == len(fin.token_ids)
    assert saved[1].stats["step"]["target_kv_alloc_bytes"] > 0


def test_block_size_setting_applies_to_next_answer(qtbot, window, host):
    engine_before = host.worker.engine
    dialog = window.open_settings()
    dialog.set_block_size(3)
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert window.settings.block_size == 3
    assert SettingsStore().load()[0].block_size == 3  # persisted
    updates = []
    host.worker.stepStats.connect(lambda rid, u: updates.append(u))
    fin = answer(qtbot, window, "Count from one to ten in words.")
    assert fin.stats.block_size_mode == "fixed"
    assert updates and all(u.latest.block_size_mode == "fixed" for u in updates)
    assert all(block <= 3 for _c, block in window.answers.last_steps)
    assert host.worker.engine is engine_before, "a block size change must not reload"
    assert window.stats.block.value.text().endswith("fixed")


def test_stop_mid_answer_saves_partial_and_engine_is_idle(qtbot, window, host):
    assert window.send_message(LONG_PROMPT)
    qtbot.waitUntil(
        lambda: window.answers.active is not None and bool(window.answers.active.text),
        timeout=60000,
    )
    qtbot.mouseClick(window.composer.send_button, Qt.MouseButton.LeftButton)  # it says Stop
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=30000)
    fin = window.answers.last_finished
    assert fin.stop_reason == "cancelled" and 0 < len(fin.token_ids) < 48
    saved = window.storage.messages(window.chats.current)[-1]
    assert saved.role == "assistant" and saved.content == fin.text and saved.content
    assert saved.stats["stop_reason"] == "cancelled"
    assert "stopped" in window.chat.messages[-1].footer.text()
    qtbot.waitUntil(lambda: not host.busy, timeout=10000)
    assert window.composer.send_button.text() == "Send"
    fin2 = answer(qtbot, window, "Say hello.")  # the engine is idle and usable
    assert fin2.stop_reason in ("eos", "length")


def test_restart_keeps_the_conversation(qtbot, window, host, dirs):
    fin = answer(qtbot, window, "What is the capital of France?")
    conv_id = window.chats.current
    window.close()
    again = MainWindow(host=host)
    qtbot.addWidget(again)
    assert again.chats.current == conv_id and conv_id in again.sidebar.ids()
    texts = [m.text for m in again.chat.messages]
    assert texts == ["What is the capital of France?", fin.text]
    assert "tok/s" in again.chat.messages[-1].footer.text()
    assert again.stats.tau_mean.value.text() == f"{fin.stats.tau_mean:.2f}"


def test_ui_stays_responsive_during_an_answer(qtbot, window):
    loop = LoopGaps()
    assert window.send_message(LONG_PROMPT)
    qtbot.waitUntil(
        lambda: window.answers.active is not None and bool(window.answers.active.text),
        timeout=60000,
    )
    loop.start()
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    loop.stop()
    gaps = loop.gaps
    print(f"event-loop gaps: n={len(gaps)} max={max(gaps)} ms")
    assert len(gaps) >= 20, "the answer was too short to measure"
    assert max(gaps) < 100, f"event loop stalled for {max(gaps)} ms"


def test_regenerate_and_edit_resend(qtbot, window):
    answer(qtbot, window, "Give me a fruit name.")
    first = window.storage.messages(window.chats.current)
    window.regenerate()
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    second = window.storage.messages(window.chats.current)
    assert len(second) == 2 and second[1].id != first[1].id and second[0].id == first[0].id

    user_card = window.chat.messages[0]
    window.edit_message(user_card)
    assert window.composer.text() == "Give me a fruit name."
    assert window.composer.edit_banner.isVisibleTo(window)
    window.composer.set_text("Give me a vegetable name.")
    qtbot.keyClick(window.composer.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    third = window.storage.messages(window.chats.current)
    assert [m.content for m in third][0] == "Give me a vegetable name."
    assert len(third) == 2 and third[0].id == first[0].id and third[1].id != second[1].id


def test_switching_chats_mid_answer_saves_it_where_it_belongs(qtbot, window):
    assert window.send_message(LONG_PROMPT)
    first = window.chats.current
    qtbot.waitUntil(
        lambda: window.answers.active is not None and bool(window.answers.active.text),
        timeout=60000,
    )
    window.new_conversation()
    assert window.chats.current != first and window.chat.messages == []
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=90000)
    assert window.chat.messages == []  # nothing leaked into the new chat
    saved = window.storage.messages(first)
    assert [m.role for m in saved] == ["user", "assistant"]
    assert saved[1].content == window.answers.last_finished.text
    window.open_conversation(first)
    assert window.chat.messages[-1].text == saved[1].content


def test_conversations_new_rename_search_delete_export(qtbot, window, tmp_path):
    answer(qtbot, window, "Hello there")
    first = window.chats.current
    window.new_conversation()
    second = window.chats.current
    assert second != first and window.chat.messages == []
    window.set_system_prompt("You are a pirate.")
    assert window.storage.conversation(second).system_prompt == "You are a pirate."
    window.rename_conversation(first, "Greeting chat")
    window.sidebar.search.setText("greeting")
    assert window.sidebar.ids() == [first]
    window.sidebar.search.setText("")
    md = window.export_conversation(first, tmp_path / "out.md")
    js = window.export_conversation(first, tmp_path / "out.json")
    assert md.read_text().startswith("# Greeting chat") and "Hello there" in md.read_text()
    assert json.loads(js.read_text())["messages"][0]["content"] == "Hello there"
    window.delete_conversation(first)
    assert first not in window.sidebar.ids() and window.storage.conversation(first) is None


def test_prompt_that_does_not_fit_the_context_is_reported(qtbot, window):
    huge = "lighthouse " * (N_CTX + 200)
    assert window.send_message(huge)
    qtbot.waitUntil(lambda: window.answers.active is None, timeout=60000)
    text = window.banner.text()
    assert "context" in text and str(N_CTX) in text
    window.new_conversation()
    fin = answer(qtbot, window, "Say yes.")  # still usable
    assert fin.stop_reason in ("eos", "length")


def test_drafter_that_does_not_match_keeps_the_old_one(qtbot, window, host):
    failures = []
    host.worker.drafterFailed.connect(failures.append)
    host.set_drafter("/no/such/drafter")
    qtbot.waitUntil(lambda: "Drafter not changed" in window.banner.text(), timeout=30000)
    assert "Unknown drafter" in window.banner.text()
    qtbot.waitUntil(lambda: bool(failures), timeout=5000)
    assert "Unknown drafter" in failures[0]
    assert host.worker.engine.drafter.name == "ngram"
    host.set_drafter("ngram")
    fin = answer(qtbot, window, "Say ok.")
    assert fin.stop_reason in ("eos", "length")


def test_a_draft_model_of_another_vocabulary_is_refused_in_one_line(qtbot, window, host):
    failures = []
    host.worker.drafterFailed.connect(failures.append)
    host.set_drafter("model:qwen2.5-coder-0.5b-instruct")  # 151,936 tokens; SmolLM2 49,152
    qtbot.waitUntil(lambda: bool(failures), timeout=30000)
    assert "cannot draft for" in failures[0] and "\n" not in failures[0]
    assert "151,936" in failures[0] and "49,152" in failures[0]
    qtbot.waitUntil(lambda: "cannot draft for" in window.banner.text(), timeout=5000)
    assert host.worker.engine.drafter.name == "ngram"
    host.set_drafter("ngram")


def test_about_dialog_shows_versions_and_backend(qtbot, window):
    dialog = window.open_about()
    qtbot.addWidget(dialog)
    text = dialog.text()
    for label in ("llama-cpp-python", "onnxruntime", "Qt", "Model", "Drafter", "Backend"):
        assert label in text
    assert window.engine_link.info.backend_reason in text


def test_theme_switch_applies_and_persists(qtbot, window):
    from app import theme

    window.set_theme("dark")
    assert theme.colors().name == "dark" and SettingsStore().load()[0].theme == "dark"
    assert window.palette().window().color().lightnessF() < 0.3
    window.set_theme("light")
    assert theme.colors().name == "light"
    assert window.palette().window().color().lightnessF() > 0.7


def test_sampling_values_the_engine_refuses_are_not_applied(qtbot, window):
    window.apply_settings(replace(window.settings, temperature=-1.0, max_tokens=40))
    default = AppSettings().temperature
    assert window.settings.temperature == default and window.settings.max_tokens == 40
    assert "temperature must be 0 (greedy) or more" in window.banner.text()
    saved = SettingsStore().load()
    assert saved[1] is None and saved[0].temperature == default and saved[0].max_tokens == 40


def test_drafter_change_needs_no_reload(qtbot, window, host):
    engine_before = host.worker.engine
    window.apply_settings(replace(window.settings, drafter="none"))
    qtbot.waitUntil(lambda: window.engine_link.info.drafter == "none", timeout=30000)
    assert host.worker.engine is engine_before
    assert "none" in window.stats.engine_label.text()
    fin = answer(qtbot, window, "Say ok.")
    assert fin.stats.proposed == 0 and fin.stats.tau_mean == 1.0  # nothing drafted
    window.apply_settings(replace(window.settings, drafter="ngram"))
    qtbot.waitUntil(lambda: window.engine_link.info.drafter == "ngram", timeout=30000)


def test_context_length_change_reloads_on_the_worker(qtbot, window, host):
    """Runs late in the module: it leaves the shared engine with another context."""
    engine_before = host.worker.engine
    window.apply_settings(replace(window.settings, n_ctx=1536))
    notice = window.banner.text()
    assert "Reloading the model" in notice and "context length" in notice
    assert window.engine_link.state == "loading"
    qtbot.waitUntil(lambda: window.engine_link.info is not None, timeout=180000)
    assert window.engine_link.info.n_ctx == 1536 and host.worker.engine is not engine_before
    fin = answer(qtbot, window, "Say yes.")
    assert fin.stop_reason in ("eos", "length")


def test_corrupt_settings_and_database_are_moved_aside(qtbot, host, dirs):
    """Runs late in the module: default settings mean a reload with the default context."""
    cfg, data = dirs
    (cfg / "settings.json").write_text("{ this is : broken", encoding="utf-8")
    (data / "chats.sqlite3").write_bytes(b"\x00garbage" * 512)
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.show()
    text = w.banner.text()
    assert "settings file was damaged" in text and "chat database was damaged" in text
    assert list(cfg.glob("settings.corrupt-*.json")) and list(data.glob("chats.corrupt-*.sqlite3"))
    assert w.settings == AppSettings()
    w.apply_settings(replace(w.settings, max_tokens=48, temperature=0.0))  # no reload
    qtbot.waitUntil(
        lambda: w.engine_link.info is not None and host.state == "ready", timeout=180000
    )
    fin = answer(qtbot, w, "Say hi.")
    assert fin.stop_reason in ("eos", "length")
    assert Storage().messages(w.chats.current)[-1].content == fin.text
    assert json.loads((cfg / "settings.json").read_text())["max_tokens"] == 48


def test_model_that_fails_to_load_leaves_the_app_usable(qtbot, dirs, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"NOPE" + b"\x00" * 64)
    cfg, _data = dirs
    (cfg / "settings.json").write_text(json.dumps({**SETTINGS, "model": str(bad)}), "utf-8")
    w = MainWindow()  # its own host: loading the broken file fails fast
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: "could not be loaded" in w.banner.text(), timeout=30000)
    assert w.engine_link.state == "failed"
    assert "could not be loaded" in w.banner.text() and "GGUF" in w.banner.text()
    assert w.send_message("Anyone there?")
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=10000)
    assert "No model is loaded" in w.banner.text()
    assert w.storage.messages(w.chats.current)[0].content == "Anyone there?"
