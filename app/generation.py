"""The window's side of the EngineWorker's answers.

AnswerController follows the one answer the window is waiting for (and API requests of the
local server, which take turns with it on the same worker), keeps what has arrived, and saves
the answer as it streams (at most once every SAVE_EVERY_S, so a crash or a kill loses little
and leaves it marked unfinished), then finished with its stats record. A regenerated answer
replaces the old one only once it is saved: a failure or a stop before its first token keeps
the old one. It draws nothing: the window shows what its signals say. Everything here runs
on the UI thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from app.chat_view import MessageWidget
from app.markdown import Run
from app.settings import AppSettings
from app.storage import Storage, StorageError, answer_record
from app.worker import EngineHost, GenerationRequest, StatsUpdate, disconnect_all
from engine.events import EngineInfo, Finished, StepStats

SAVE_EVERY_S = 1.0  # a streaming answer is written to disk at most this often


@dataclass
class ActiveAnswer:
    """The answer being written: its request, its chat, its card and what arrived so far."""

    request: GenerationRequest
    conv_id: int
    widget: MessageWidget
    text: str = ""
    runs: list[Run] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (committed, block size)
    latest: StepStats | None = None
    replaces: int | None = None  # the saved answer this one regenerates
    message_id: int | None = None  # its row, once its first text was saved
    saved_at: float = 0.0  # monotonic time of the last partial save


class AnswerController(QObject):
    textArrived = Signal(object)  # ActiveAnswer, with more text
    stepsArrived = Signal(object)  # StatsUpdate of the window's answer or of an API request
    saveFailed = Signal(str)  # a finished answer could not be saved: why
    # ActiveAnswer, Finished, the saved stats record (None: stopped before the first token),
    # the saved message id (None: not saved)
    answerFinished = Signal(object, object, object, object)
    answerFailed = Signal(object, str, str)  # ActiveAnswer, message, kind
    serverJobStarted = Signal(str)  # what asked
    serverJobEnded = Signal()

    def __init__(
        self,
        host: EngineHost,
        storage: Storage,
        engine_info: Callable[[], EngineInfo | None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.host = host
        self.storage = storage
        self._engine_info = engine_info  # the window's: the record names what really answered
        self.active: ActiveAnswer | None = None
        self.last_finished: Finished | None = None
        self.last_steps: list[tuple[int, int]] = []
        self.server_job: int | None = None  # the worker's request id of a running API request
        w = host.worker
        self._connections = [
            (w.textDelta, self._on_delta),
            (w.stepStats, self._on_stats),
            (w.finished, self._on_finished),
            (w.error, self._on_error),
            (w.serverJobStarted, self._on_server_job_started),
            (w.serverJobEnded, self._on_server_job_ended),
        ]
        for signal, slot in self._connections:
            signal.connect(slot)

    def start(
        self,
        messages: list[dict],
        settings: AppSettings,
        conv_id: int,
        widget: MessageWidget,
        replaces: int | None = None,
    ) -> None:
        """Queue an answer to `messages` for chat `conv_id`, shown in `widget`; `replaces`:
        the saved answer it regenerates."""
        request = GenerationRequest(messages, settings.generation_settings())
        self.active = ActiveAnswer(request, conv_id, widget, replaces=replaces)
        self.last_steps = []
        self.host.generate(request)

    def stop(self) -> bool:
        """Ask the running answer to stop; its partial text still arrives (and is saved)."""
        if self.active is None:
            return False
        self.active.request.cancel.set()
        return True

    def disconnect_host(self) -> None:
        """Stop listening to the worker (the host may outlive the window)."""
        disconnect_all(self._connections)
        self._connections = []

    def _mine(self, request_id: int) -> ActiveAnswer | None:
        a = self.active
        return a if a is not None and a.request.id == request_id else None

    def _on_delta(self, request_id: int, runs: list[Run]) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        a.runs.extend(runs)
        a.text += "".join(t for t, _d in runs)
        if time.monotonic() - a.saved_at >= SAVE_EVERY_S:
            self._save_partial(a)
        self.textArrived.emit(a)

    def _save_partial(self, a: ActiveAnswer) -> None:
        a.saved_at = time.monotonic()
        try:
            if a.message_id is None:
                if self.storage.conversation(a.conv_id) is None:  # deleted meanwhile
                    return
                a.message_id = self.storage.begin_answer(a.conv_id, a.replaces)
            self.storage.write_partial(a.message_id, a.text)
        except StorageError as exc:
            self.saveFailed.emit(f"The answer could not be saved as it was written: {exc}")

    def _on_stats(self, request_id: int, update: StatsUpdate) -> None:
        if request_id == self.server_job and self.active is None:
            self.stepsArrived.emit(update)  # an API request, shown live
            return
        a = self._mine(request_id)
        if a is None:
            return
        a.steps.extend(update.steps)
        a.latest = update.latest
        self.last_steps = a.steps
        self.stepsArrived.emit(update)

    def _on_finished(self, request_id: int, fin: Finished) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        self.active = None
        self.last_finished = fin
        record, msg_id = None, None
        if fin.text or fin.stop_reason != "cancelled":  # a stop before any text saves nothing
            record = answer_record(fin, a.steps, a.runs, self._engine_info())
            msg_id = self._save(a, fin.text, record)
        else:
            self._drop(a)
        self.answerFinished.emit(a, fin, record, msg_id)

    def _save(self, a: ActiveAnswer, text: str, record: dict) -> int | None:
        try:
            if self.storage.conversation(a.conv_id) is None:  # deleted meanwhile
                return None
            if a.message_id is None:
                a.message_id = self.storage.begin_answer(a.conv_id, a.replaces)
            self.storage.finish_answer(a.message_id, text, record)
            return a.message_id
        except StorageError as exc:
            self.saveFailed.emit(f"The answer could not be saved: {exc}")
        return None

    def _drop(self, a: ActiveAnswer) -> None:
        """Forget the partial row of an answer that will not be finished; the answer it
        regenerates, if any, stays."""
        if a.message_id is None:
            return
        try:
            self.storage.delete_message(a.message_id)
        except StorageError as exc:
            self.saveFailed.emit(f"The unfinished answer could not be removed: {exc}")
        a.message_id = None

    def _on_error(self, request_id: int, message: str, kind: str) -> None:
        a = self._mine(request_id)
        if a is None:
            return
        self.active = None
        if a.replaces is not None:
            self._drop(a)  # the regenerated answer failed: the old one is the answer
        elif a.message_id is not None:
            self._save_partial(a)  # what was written stays, marked unfinished
        self.answerFailed.emit(a, message, kind)

    def _on_server_job_started(self, request_id: int, label: str) -> None:
        self.server_job = request_id
        self.serverJobStarted.emit(label)

    def _on_server_job_ended(self, _request_id: int) -> None:
        self.server_job = None
        self.serverJobEnded.emit()
