"""Model manager: the catalog with installed/available state, downloads with progress and
cancel (on their own worker thread), delete, "use this model", and "speed up this model"
(training a HyFlash drafter for an installed model that has none: app.speedup_dialog); below
it the GGUF files already on this computer (app.local_models), which .gguf files dropped on
the window join."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.capabilities import draft_model_note
from app.local_models import LocalModels, gguf_paths, make_table
from app.settings import AppSettings
from app.speedup_dialog import SpeedupDialog
from app.speedup_job import unfinished_job
from engine.drafters.spec import hyflash_status
from engine.events import EngineError
from engine.models.catalog import CatalogEntry, load_catalog
from engine.models.discovery import Roots
from engine.models.draft_models import header_file
from engine.models.resolve import resolve_target
from engine.units import format_size

PROGRESS_INTERVAL_S = 0.1


def is_available(entry: CatalogEntry) -> bool:
    """Installed (Hub: downloaded and verified; PyPI: the package is present; PyPI parts:
    every part package is present, unpacked on first use)."""
    if entry.source.get("kind") == "hub":
        from engine.models.downloads import is_installed

        return is_installed(entry)
    if entry.source.get("kind") == "pypi-parts":
        from engine.models.pypi_parts import parts_installed

        return parts_installed(entry.source)
    try:
        resolve_target(entry.id)
    except EngineError:
        return False
    return True


class DownloadWorker(QObject):
    progress = Signal(str, int, int)  # id, bytes done, total (0 = unknown)
    done = Signal(str, str)  # id, path
    failed = Signal(str, str, bool)  # id, message, cancelled

    @Slot(object, object)
    def download(self, entry: CatalogEntry, cancel: threading.Event) -> None:
        from engine.models.download_errors import DownloadCancelled
        from engine.models.downloads import download_model

        last = 0.0

        def report(done: int, total: int | None) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PROGRESS_INTERVAL_S or (total and done >= total):
                last = now
                self.progress.emit(entry.id, done, total or 0)

        try:
            path = download_model(entry, progress=report, cancel=cancel)
        except DownloadCancelled as exc:
            self.failed.emit(entry.id, str(exc), True)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the row
            text = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            self.failed.emit(entry.id, text, False)
        else:
            self.done.emit(entry.id, str(path))


class _Row:
    def __init__(self, entry: CatalogEntry) -> None:
        self.entry = entry
        self.status = QTableWidgetItem()
        self.actions = QWidget()
        layout = QHBoxLayout(self.actions)
        layout.setContentsMargins(4, 2, 4, 2)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedWidth(90)
        self.download = QPushButton("Download")
        self.cancel = QPushButton("Cancel")
        self.delete = QPushButton("Delete")
        self.use = QPushButton("Use this model")
        self.speedup = QPushButton("Speed up this model…")
        self.speedup.setToolTip("Train a HyFlash drafter for this model on this computer")
        widgets = (self.progress, self.download, self.cancel, self.delete, self.use, self.speedup)
        for w in widgets:
            layout.addWidget(w)
        layout.addStretch(1)
        self.cancel_event: threading.Event | None = None
        self.name: QTableWidgetItem | None = None
        self.drafter = QTableWidgetItem()

    def show_drafter(self, installed: bool) -> bool:
        """Which speculative drafter the model gets: a HyFlash drafter (shipped or trained
        here), or n-gram lookup. True for HyFlash."""
        path = None
        if installed and self.entry.source.get("kind") == "hub":
            from engine.models.downloads import cached_model_path

            # a trained drafter is pinned to its GGUF's sha256; the catalog pins it for the
            # packaged models but not for every Hub file, so the file itself is the key there
            path = cached_model_path(self.entry)
        has, why = hyflash_status(self.entry.id, path)
        draft = None if has else draft_model_note(header_file(self.entry), self.entry.id)
        if has:
            text, tip = "HyFlash", "A learned HyFlash drafter is installed for this model"
        elif draft is not None:
            text, tip = draft
        else:
            text = "n-gram"
            tip = f"{why} Speculative decoding uses n-gram lookup (no drafter model needed)."
        self.drafter.setText(text)
        self.drafter.setToolTip(tip)
        return has


class ModelManager(QDialog):
    modelChosen = Signal(str)  # a catalog id or a GGUF file's path
    requestDownload = Signal(object, object)
    sourcesChanged = Signal(object, object)  # the files added and the folders listed, to keep

    def __init__(
        self,
        current_model: str | None,
        ram_bytes: int | None = None,
        parent=None,
        *,
        settings: AppSettings | None = None,
        roots: Roots | None = None,
    ) -> None:
        """`settings` give the files and folders to look in and the threads and backend the
        kernel verdicts are kept for; `roots` where other applications keep models (None:
        this machine's)."""
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(1100, 680)
        self.setAcceptDrops(True)
        self.current = current_model
        self.ram_bytes = ram_bytes
        col = QVBoxLayout(self)
        intro = QLabel(
            "The embedded model ships with the app. Others download once from the Hugging "
            "Face Hub (resumable, checksum-verified) and then run offline."
        )
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        col.addWidget(intro)
        self.table = make_table(("Model", "Size", "RAM needed", "Context", "Drafter", "Status", ""))
        col.addWidget(self.table, 1)
        self.local = LocalModels(settings, roots)
        self.local.useRequested.connect(self.use)
        self.local.speedupRequested.connect(self.open_speedup)
        self.local.sourcesChanged.connect(self.sourcesChanged)
        col.addWidget(self.local, 1)
        self.message = QLabel()
        self.message.setWordWrap(True)
        col.addWidget(self.message)

        self.rows: dict[str, _Row] = {}
        for entry in load_catalog().values():
            self._add_row(entry)
        self.local.rescan(current_model)
        self.refresh()

        self.thread = QThread()
        self.worker = DownloadWorker()
        self.worker.moveToThread(self.thread)
        self.requestDownload.connect(self.worker.download)
        self.worker.progress.connect(self._on_progress)
        self.worker.done.connect(self._on_done)
        self.worker.failed.connect(self._on_failed)
        self.thread.start()

    def _add_row(self, entry: CatalogEntry) -> None:
        row = _Row(entry)
        r = self.table.rowCount()
        self.table.insertRow(r)
        use = entry.extra.get("recommended_for")
        name = QTableWidgetItem(f"{entry.name} · recommended for {use}" if use else entry.name)
        row.name = name
        name.setToolTip(f"{entry.id} · license {entry.license or '?'}")
        ram = QTableWidgetItem(format_size(entry.ram_gb * 1e9) if entry.ram_gb else "?")
        if self.ram_bytes and entry.ram_gb * 1e9 > self.ram_bytes:
            ram.setForeground(Qt.GlobalColor.red)
            ram.setToolTip("More than this computer's memory")
        ctx = QTableWidgetItem(f"{entry.context_length // 1024}K" if entry.context_length else "?")
        size = QTableWidgetItem(format_size(entry.size_bytes))
        for c, item in enumerate((name, size, ram, ctx, row.drafter, row.status)):
            self.table.setItem(r, c, item)
        self.table.setCellWidget(r, 6, row.actions)
        row.download.clicked.connect(lambda: self.start_download(entry.id))
        row.cancel.clicked.connect(lambda: self.cancel_download(entry.id))
        row.delete.clicked.connect(lambda: self.delete(entry.id))
        row.use.clicked.connect(lambda: self.use(entry.id))
        row.speedup.clicked.connect(lambda: self.open_speedup(entry.id))
        self.rows[entry.id] = row

    def drafter_of(self, model_id: str) -> str:
        return self.table.item(list(self.rows).index(model_id), 4).text()

    def status_of(self, model_id: str) -> str:
        return self.rows[model_id].status.text()

    def refresh(self) -> None:
        for model_id, row in self.rows.items():
            hub = row.entry.source.get("kind") == "hub"
            busy = row.cancel_event is not None
            installed = is_available(row.entry)
            in_use = model_id == self.current
            if busy:
                status = row.status.text() or "Downloading…"
            elif in_use:
                status = "In use"
            elif installed:
                status = "Installed" if hub else "Bundled"
            else:
                status = "Available" if hub else "Not installed"
            row.status.setText(status)
            font = row.name.font()
            font.setBold(in_use)
            row.name.setFont(font)
            row.progress.setVisible(busy)
            row.download.setVisible(hub and not installed and not busy)
            row.cancel.setVisible(busy)
            row.delete.setVisible(hub and installed and not busy)
            row.delete.setEnabled(not in_use)
            row.delete.setToolTip("The model in use cannot be deleted" if in_use else "")
            row.use.setVisible(installed and not in_use and not busy)
            has_drafter = row.show_drafter(installed)
            offer_speedup = installed and not has_drafter and not busy
            row.speedup.setVisible(offer_speedup)
            if offer_speedup:
                resume = unfinished_job(model_id) is not None
                row.speedup.setText("Resume speed-up…" if resume else "Speed up this model…")
        self.local.refresh(self.current)

    # ----- actions ----------------------------------------------------------------------------

    def start_download(self, model_id: str) -> None:
        row = self.rows[model_id]
        row.cancel_event = threading.Event()
        row.progress.setValue(0)
        row.status.setText("Queued…")
        self.message.setText("")
        self.refresh()
        self.requestDownload.emit(row.entry, row.cancel_event)

    def cancel_download(self, model_id: str) -> None:
        row = self.rows[model_id]
        if row.cancel_event is not None:
            row.cancel_event.set()
            row.status.setText("Cancelling…")

    def delete(self, model_id: str) -> None:
        from engine.models.downloads import delete_model

        row = self.rows[model_id]
        if model_id == self.current:
            return
        freed = delete_model(row.entry)
        self.message.setText(f"Deleted {row.entry.name}: {format_size(freed)} freed.")
        self.refresh()

    def use(self, model_id: str) -> None:
        self.current = model_id
        self.refresh()
        self.modelChosen.emit(model_id)

    def open_speedup(self, model_id: str, name: str | None = None) -> SpeedupDialog:
        """For a catalog id, or a file's path with its `name`."""
        name = name or self.rows[model_id].entry.name
        dialog = SpeedupDialog(model_id, name, parent=self)
        dialog.closedWith.connect(self._on_speedup_closed)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def _on_speedup_closed(self, _model_id: str, message: str) -> None:
        if message:
            self.message.setText(message)
        self.refresh()  # a drafter installed, or a job left to resume

    # ----- dropped files ----------------------------------------------------------------------

    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if gguf_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        paths = gguf_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.local.add_files(paths)

    # ----- worker signals ---------------------------------------------------------------------

    def _on_progress(self, model_id: str, done: int, total: int) -> None:
        row = self.rows[model_id]
        if total:
            row.progress.setValue(int(1000 * done / total))
            row.status.setText(f"{format_size(done)} of {format_size(total)}")
        else:
            row.status.setText(f"{format_size(done)}")

    def _on_done(self, model_id: str, _path: str) -> None:
        row = self.rows[model_id]
        row.cancel_event = None
        self.message.setText(f"{row.entry.name} is ready to use.")
        self.refresh()

    def _on_failed(self, model_id: str, message: str, cancelled: bool) -> None:
        row = self.rows[model_id]
        row.cancel_event = None
        row.status.setText("")
        self.message.setText(message)
        self.refresh()
        if cancelled:
            row.status.setText("Cancelled")

    def shutdown(self) -> None:
        for row in self.rows.values():
            if row.cancel_event is not None:
                row.cancel_event.set()
        self.thread.quit()
        self.thread.wait(10000)

    def done(self, result: int) -> None:  # closing the window stops the download thread
        self.shutdown()
        super().done(result)
