"""App pieces that need no model: settings, storage, Markdown splitting, exports, widgets."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from app import theme
from app.composer import Composer
from app.export import to_json, to_markdown, write_export
from app.format import footer_line
from app.markdown import drafted_spans, merge_runs, run_pieces, split_blocks
from app.settings import (
    AppSettings,
    SettingsStore,
    checked,
    needs_reload,
    settings_from_dict,
)
from app.settings_dialog import SettingsDialog
from app.stats_panel import MAX_PLOT_STEPS, StatsPanel
from app.storage import Storage, compact_runs, expand_runs
from engine.events import GenerationSettings, StepStats
from engine.paths import REPO

# ----- settings -----------------------------------------------------------------------------


def test_settings_round_trip(tmp_path):
    store = SettingsStore(tmp_path)
    settings, message = store.load()
    assert message is None and settings == AppSettings()
    settings.block_size = 4
    settings.theme = "dark"
    store.save(settings)
    again, message = SettingsStore(tmp_path).load()
    assert message is None
    assert again.block_size == 4 and again.theme == "dark"


def test_corrupt_settings_file_is_moved_aside(tmp_path):
    (tmp_path / "settings.json").write_text("{not json", encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    assert settings == AppSettings()
    assert message and "damaged" in message
    moved = list(tmp_path.glob("settings.corrupt-*.json"))
    assert len(moved) == 1 and moved[0].read_text() == "{not json"
    assert not (tmp_path / "settings.json").exists()


def test_bad_setting_values_fall_back_one_by_one(tmp_path):
    data = {"block_size": 99, "temperature": "hot", "theme": "dark", "n_ctx": 2048}
    (tmp_path / "settings.json").write_text(json.dumps(data), encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    assert settings.block_size == "auto" and settings.temperature == AppSettings().temperature
    assert settings.theme == "dark" and settings.n_ctx == 2048
    assert "block_size" in message and "temperature" in message


def test_sampling_values_the_engine_refuses_are_reset_with_its_message(tmp_path):
    data = {"temperature": -1, "top_p": 5, "theme": "dark", "max_tokens": 100}
    (tmp_path / "settings.json").write_text(json.dumps(data), encoding="utf-8")
    settings, message = SettingsStore(tmp_path).load()
    defaults = AppSettings()
    assert (settings.temperature, settings.top_p) == (defaults.temperature, defaults.top_p)
    assert settings.theme == "dark" and settings.max_tokens == 100  # nothing else is lost
    assert "temperature must be 0 (greedy) or more, not -1" in message
    assert "top-p must be above 0 and at most 1, not 5" in message
    # settings applied at run time get the same rule
    fixed, message = checked(AppSettings(temperature=float("nan"), top_p=0.0, n_ctx=2048))
    assert (fixed.temperature, fixed.top_p, fixed.n_ctx) == (0.2, 0.9, 2048)
    assert "temperature" in message and "top-p" in message
    assert checked(AppSettings(temperature=0.0, top_p=1.0)) == (
        AppSettings(temperature=0.0, top_p=1.0),
        None,
    )


def test_settings_dialog_cannot_produce_sampling_values_the_engine_refuses(qtbot):
    dialog = SettingsDialog(AppSettings(), (True, ""), {})
    qtbot.addWidget(dialog)
    for temperature, top_p in ((-1.0, 5.0), (99.0, -3.0), (0.0, 0.0)):
        dialog.temperature.setValue(temperature)
        dialog.top_p.setValue(top_p)
        values = dialog.values()
        GenerationSettings(temperature=values.temperature, top_p=values.top_p)  # raises if bad
        assert checked(values)[1] is None


def test_drafter_and_backend_choices_come_from_the_engine():
    from app import settings
    from engine.drafters import DRAFTER_CHOICES
    from engine.llama.backends import BACKEND_NAMES

    assert sorted(settings.DRAFTERS) == sorted(DRAFTER_CHOICES)
    assert settings.BACKENDS == BACKEND_NAMES


def test_reload_needed_only_for_runtime_fields():
    base = AppSettings()
    assert needs_reload(base, AppSettings(block_size=2, drafter="none", temperature=1.0)) == []
    assert needs_reload(base, AppSettings(n_ctx=2048, backend="cpu")) == ["n_ctx", "backend"]
    settings, bad = settings_from_dict({"block_size": 1, "n_threads": 2})
    assert bad == [] and settings.generation_settings().block_size == 1


# ----- storage ------------------------------------------------------------------------------


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


# ----- markdown and runs --------------------------------------------------------------------


def test_split_blocks_prose_and_code_with_offsets():
    src = "Intro **bold**\n\n```python\nprint(1)\nx = 2\n```\nAfter.\n"
    blocks = split_blocks(src)
    assert [b.kind for b in blocks] == ["text", "code", "text"]
    code = blocks[1]
    assert code.lang == "python" and code.text == "print(1)\nx = 2" and code.closed
    assert src[code.start : code.start + len(code.text)] == code.text
    streaming = split_blocks("Look:\n```js\nlet a")
    assert streaming[-1].kind == "code" and not streaming[-1].closed
    assert streaming[-1].text == "let a"


def test_runs_map_onto_blocks():
    runs = merge_runs([("ab", True), ("c", True), ("", False), ("de", False), ("f", True)])
    assert runs == [("abc", True), ("de", False), ("f", True)]
    assert drafted_spans(runs, 1, 6) == [(0, 2), (4, 5)]
    assert run_pieces(runs, 2, 5) == [("c", True), ("de", False)]
    text = "abcdef"
    assert expand_runs(text, compact_runs(runs)) == runs
    assert expand_runs("short", compact_runs(runs)) is None  # lengths disagree: no tint


# ----- exports ------------------------------------------------------------------------------


def test_export_markdown_and_json(tmp_path):
    db = Storage(tmp_path / "chats.sqlite3")
    conv_id = db.create_conversation("Export me", "You are terse.")
    db.add_message(conv_id, "user", "Hi")
    stats = {
        "tokens": 5,
        "tokens_per_s": 12.5,
        "tau_mean": 1.8,
        "ttft_s": 0.2,
        "stop_reason": "eos",
    }
    db.add_message(conv_id, "assistant", "```py\nprint('hi')\n```", stats)
    conv, msgs = db.conversation(conv_id), db.messages(conv_id)
    md = to_markdown(conv, msgs)
    assert md.startswith("# Export me") and "> You are terse." in md
    assert "```py\nprint('hi')\n```" in md and footer_line(stats) in md
    data = to_json(conv, msgs)
    assert data["messages"][1]["stats"]["tau_mean"] == 1.8
    out = write_export(tmp_path / "c.json", conv, msgs)
    assert json.loads(out.read_text())["title"] == "Export me"
    db.close()


def test_footer_line_has_tokens_speed_tau_ttft():
    line = footer_line(
        {
            "tokens": 40,
            "tokens_per_s": 31.24,
            "tau_mean": 2.5,
            "ttft_s": 0.123,
            "stop_reason": "cancelled",
        }
    )
    assert line == "40 tokens  ·  31.2 tok/s  ·  τ 2.50  ·  TTFT 123 ms  ·  stopped"


# ----- widgets ------------------------------------------------------------------------------


def test_composer_enter_sends_shift_enter_breaks_line(qtbot):
    composer = Composer()
    qtbot.addWidget(composer)
    sent = []
    composer.sendRequested.connect(sent.append)
    qtbot.keyClicks(composer.input, "line one")
    qtbot.keyClick(composer.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer.input, "line two")
    assert sent == []
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent == ["line one\nline two"]
    composer.set_generating(True)
    assert composer.send_button.text() == "Stop"
    qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert len(sent) == 1  # no second send while answering


def _step(**overrides) -> StepStats:
    values = dict(
        step=3,
        block_size=4,
        proposed=3,
        accepted=2,
        committed=3,
        tau_mean=2.25,
        slot_accept_counts=[3, 2, 0],
        slot_propose_counts=[3, 3, 2],
        tokens_generated=9,
        tokens_per_s=42.0,
        ttft_s=0.05,
        prefill_tokens=20,
        prefill_tokens_per_s=400.0,
        target_kv_bytes=3 * 2**20,
        target_kv_alloc_bytes=48 * 2**20,
        draft_memory_bytes=2048,
        draft_ms=0.2,
        verify_ms=20.0,
        block_size_mode="fixed",
    )
    values.update(overrides)
    return StepStats(**values)


def test_stats_panel_shows_tau_histogram_and_memory(qtbot):
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.start_answer()
    panel.update_steps([(1, 4), (3, 4), (3, 4)], _step())
    assert panel.tau_mean.value.text() == "2.25" and panel.tau_step.value.text() == "3"
    assert panel.block.value.text() == "4 · fixed"
    assert panel.plot.committed == [1, 3, 3]
    assert panel.histogram.rates() == [1.0, 2 / 3, 0.0]
    assert panel.kv_bar.value.text() == "3.1 MB / 50.3 MB"  # engine.units.format_size
    assert panel.kv_bar.bar.value() == 62  # 3/48 of 1000
    assert "MB" in panel.draft_bar.value.text()
    panel.resize(340, 900)
    image = panel.grab().toImage()
    assert image.width() >= 300  # paints without error


def test_settings_dialog_greys_out_unavailable_choices(qtbot):
    backends = {
        "auto": (True, "auto"),
        "cpu": (True, "cpu"),
        "cuda": (False, "no CUDA here"),
        "metal": (False, "no Metal"),
        "qnn": (False, "no QNN"),
    }
    dialog = SettingsDialog(AppSettings(), (False, "No HyFlash drafter is installed"), backends)
    qtbot.addWidget(dialog)
    model = dialog.drafter.model()
    hyflash = model.item(0)
    assert not hyflash.isEnabled() and "No HyFlash drafter" in hyflash.toolTip()
    assert model.item(1).isEnabled()  # n-gram
    cuda = dialog.backend.model().item(2)
    assert not cuda.isEnabled() and cuda.toolTip() == "no CUDA here"
    dialog.set_block_size(6)
    dialog.n_ctx.setValue(2048)
    assert "reloads the model" in dialog.reload_note.text()
    values = dialog.values()
    assert values.block_size == 6 and values.n_ctx == 2048


def test_pyside_void_calls_do_not_drain_none(qtbot):
    """PySide6 6.12.0 on Python 3.11 drops a reference to None per void call and crashes the
    app while streaming; pyproject pins a good version, which this checks."""
    from PySide6.QtWidgets import QLabel

    label = QLabel()
    qtbot.addWidget(label)
    before = sys.getrefcount(None)
    for _ in range(20000):
        label.setText("x")
    assert before - sys.getrefcount(None) < 1000


@pytest.mark.parametrize("source", ["", "no code at all", "```\n```"])
def test_split_blocks_edge_cases(source):
    blocks = split_blocks(source)
    for b in blocks:
        assert b.kind in ("text", "code")
        assert source[b.start : b.start + len(b.text)] == b.text


def test_message_card_code_block_copy_and_tint(qtbot):
    from PySide6.QtGui import QFontInfo, QGuiApplication, QTextCursor

    from app import theme
    from app.chat_view import MessageWidget

    card = MessageWidget("assistant", 10)
    qtbot.addWidget(card)
    text = "Here:\n```python\nprint('hi')\n```\nDone **now**."
    runs = [
        ("Here:\n```python\n", False),
        ("print('hi')", True),
        ("\n```\nDone ", False),
        ("**now**.", True),
    ]
    card.set_text(text, runs)
    code = card.code_blocks()
    assert len(code) == 1 and code[0].code == "print('hi')" and code[0].lang.text() == "python"
    assert QFontInfo(code[0].view.font()).fixedPitch()
    qtbot.mouseClick(code[0].copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "print('hi')"
    cursor = QTextCursor(code[0].view.document())
    cursor.setPosition(2)
    assert cursor.charFormat().background().color().name() == theme.colors().tint
    assert "Done now." in card.rendered_text()  # Markdown rendered, markup gone
    copied = []
    card.copyRequested.connect(lambda w: copied.append(w.text))
    qtbot.mouseClick(card.copy_button, Qt.MouseButton.LeftButton)
    assert copied == [text]


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (4, 3), (8, 7), (64, 8)])
def test_auto_threads_per_core_count(monkeypatch, cores, threads):
    from app import settings

    monkeypatch.setattr(settings, "usable_cores", lambda: cores)
    assert settings.auto_threads() == threads


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU sets are Linux's")
def test_threads_follow_the_cores_the_process_may_use():
    # a process pinned to one core (taskset, a container's CPU set) gets one thread, whatever
    # the machine has
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from app.settings import auto_threads; from engine.llama.target import default_threads; "
        "print(auto_threads(), default_threads())"
    )
    repo = REPO
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo, env=env
    )
    assert out.stdout.split() == ["1", "1"]


class _PaintCounter(QObject):
    """Counts the paint events a widget receives."""

    def __init__(self, widget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, _obj, event) -> bool:  # noqa: N802
        self.count += event.type() == QEvent.Type.Paint
        return False


def test_stats_panel_repaints_only_what_changed(qtbot):
    """Stats arrive several times a second: the slot histogram and the memory bars stay as they are
    when their values did not change, while the tau plot takes every update."""
    panel = StatsPanel()
    qtbot.addWidget(panel)
    panel.resize(340, 900)
    panel.show()
    qtbot.waitExposed(panel)
    panel.start_answer()
    panel.update_steps([(3, 4)], _step())
    QApplication.processEvents()
    histogram, plot = _PaintCounter(panel.histogram), _PaintCounter(panel.plot)
    kv_bar = _PaintCounter(panel.kv_bar.bar)
    panel.update_steps([(2, 4)], _step(committed=2, tokens_generated=11))
    QApplication.processEvents()
    assert plot.count == 1 and histogram.count == 0 and kv_bar.count == 0
    panel.update_steps([(3, 4)], _step(slot_accept_counts=[3, 3, 0], target_kv_bytes=6 * 2**20))
    QApplication.processEvents()
    assert plot.count == 2 and histogram.count == 1 and kv_bar.count == 1
    assert panel.histogram.rates() == [1.0, 1.0, 0.0]
    assert panel.kv_bar.bar.value() == 125  # 6/48 of 1000


def test_tau_plot_paints_bars_and_mean_line(qtbot):
    """The plot fills its own background (it is opaque), draws one bar per step and the
    running mean to the last step, also with more steps than pixels."""
    panel = StatsPanel()
    qtbot.addWidget(panel)
    plot = panel.plot
    plot.resize(300, 120)
    c = theme.colors()
    for steps in ([(1, 4)] * 10 + [(4, 4)] * 10, [(2, 4)] * MAX_PLOT_STEPS):
        plot.clear()
        plot.add(steps)
        image = plot.grab().toImage()
        colours = {image.pixelColor(x, y).name() for x in range(300) for y in range(120)}
        assert image.pixelColor(1, 1).name() == QColor(c.surface).name()
        assert QColor(c.plot_bar).name() in colours
        assert QColor(c.plot_line).name() in colours
    # the last step's bar (height 2 of 4) reaches the right end of the drawing area
    rect = plot.rect().adjusted(26, 6, -4, -16)
    assert image.pixelColor(rect.right() - 1, rect.bottom() - 2).name() != QColor(c.surface).name()
