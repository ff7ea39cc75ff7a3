"""Helpers for Qt tests."""

from __future__ import annotations

import time

from PySide6.QtCore import QCoreApplication, QEventLoop


def spin(predicate, timeout: float = 60.0) -> bool:
    """Run the Qt event loop until predicate() or the timeout (module fixtures lack qtbot)."""
    end = time.monotonic() + timeout
    while not predicate() and time.monotonic() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.005)
    return bool(predicate())


def loaded_host(config):
    """An app.worker.EngineHost with `config` loaded on the real model (the caller shuts it
    down), or a failed assertion saying why not."""
    from app.worker import EngineHost

    host = EngineHost()
    host.load(config)
    assert spin(lambda: host.state in ("ready", "failed"), 180), "model did not load"
    assert host.state == "ready", host.state_message
    return host


def app_dirs(tmp_path, monkeypatch, settings: dict):
    """Fresh config and data folders for the app, with `settings` saved: (config, data)."""
    import json

    cfg, data = tmp_path / "config", tmp_path / "data"
    cfg.mkdir()
    data.mkdir()
    monkeypatch.setenv("HYFLASH_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(data))
    (cfg / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return cfg, data
