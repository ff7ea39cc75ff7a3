"""Screenshots of the main window during a real answer, light and dark, for people to look at.

Saved to $HYFLASH_SCREENSHOT_DIR (default: a pytest tmp dir, printed). The assertions check
that the pictures show something (a streaming answer, stats, the theme's colours).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QImage

from app.main_window import MainWindow

SETTINGS = {
    "n_ctx": 2048,
    "n_threads": 1,
    "max_tokens": 48,
    "temperature": 0.0,
    "drafter": "ngram",
    "block_size": 4,
}


@pytest.fixture(scope="module")
def shot_dir(tmp_path_factory) -> Path:
    env = os.environ.get("HYFLASH_SCREENSHOT_DIR")
    path = Path(env) if env else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {path}")
    return path


def luminance(color: QColor) -> float:
    return 0.2126 * color.redF() + 0.7152 * color.greenF() + 0.0722 * color.blueF()


def distinct_colours(image: QImage, step: int = 23) -> int:
    seen = set()
    for y in range(0, image.height(), step):
        for x in range(0, image.width(), step):
            seen.add(image.pixel(x, y))
    return len(seen)


@pytest.mark.parametrize("theme_name", ["light", "dark"])
def test_screenshot_during_an_answer(qtbot, host, tmp_path, monkeypatch, shot_dir, theme_name):
    (tmp_path / "cfg").mkdir()
    monkeypatch.setenv("HYFLASH_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "data"))
    settings = {**SETTINGS, "theme": theme_name}
    (tmp_path / "cfg" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.resize(1360, 860)
    w.show()
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=60000)
    w.set_system_prompt("You are a helpful assistant who writes short answers.")
    assert w.send_message("Write a Python function that reverses a string.")
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=90000)
    assert w.send_message("Show the same function again, then explain it in one sentence.")
    qtbot.waitUntil(
        lambda: w.answers.active is not None and len(w.answers.active.steps) >= 6, timeout=90000
    )
    streaming = w.grab().toImage()
    path = shot_dir / f"main-window-{theme_name}-streaming.png"
    assert streaming.save(str(path))
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=90000)
    qtbot.wait(100)
    finished = w.grab().toImage()
    assert finished.save(str(shot_dir / f"main-window-{theme_name}-finished.png"))

    assert path.stat().st_size > 20_000
    assert streaming.width() >= 1200 and distinct_colours(streaming) > 12
    chat_bg = streaming.pixelColor(w.chat.geometry().center().x() + 200, streaming.height() - 140)
    if theme_name == "dark":
        assert luminance(chat_bg) < 0.3
    else:
        assert luminance(chat_bg) > 0.7
    assert w.stats.tau_mean.value.text() != "–" and "MB" in w.stats.kv_bar.value.text()

    dialog = w.open_settings()
    qtbot.addWidget(dialog)
    qtbot.wait(50)
    assert dialog.grab().save(str(shot_dir / f"settings-{theme_name}.png"))
    dialog.reject()
    manager = w.open_model_manager()
    qtbot.addWidget(manager)
    qtbot.wait(50)
    assert manager.grab().save(str(shot_dir / f"model-manager-{theme_name}.png"))
    manager.reject()
