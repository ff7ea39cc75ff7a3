"""The engine worker: a QObject that owns the Engine and runs on its own QThread.

Everything slow (loading the model, decoding, switching drafters) happens in this object's
slots, which Qt calls on the worker thread through queued connections; results come back as
queued signals. The UI thread never touches the Engine. Text is coalesced to at most 10
updates a second and the stats panel to 4, so that rendering takes little from decoding.

Stopping uses the request's own threading.Event (created by the UI before the request is
queued), so a Stop that arrives before the worker even starts the request still counts.

The local server's API requests (engine.server) run here too, queued like the window's
answers, so the two never decode at the same time and are served in arrival order.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.markdown import Run, merge_runs
from engine.events import (
    DEFAULT_N_CTX,
    DrafterMismatchError,
    EngineError,
    ErrorEvent,
    Finished,
    GenerationSettings,
    StepStats,
    TextDelta,
)
from engine.options import FALLBACK_DRAFTER

# at most 10 UI updates a second: on 2 cores the window kept 0.93-1.02x of the command line's
# decode speed at 10 a second against 0.87-0.94x at 30 (docs/bench/app-speed-kinds, issue 39)
EMIT_INTERVAL_S = 1 / 10
# the stats panel (numbers, tau plot, histogram) at most 4 times a second: its updates at 10
# a second cost the window 2-6% of the command line's speed on 2 cores (issue 39, session 30)
STATS_INTERVAL_S = 1 / 4
_request_ids = itertools.count(1)


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None
    drafter: str = FALLBACK_DRAFTER  # Engine's own default; the app's is AppSettings'
    n_ctx: int = DEFAULT_N_CTX
    n_threads: int | None = None
    backend: str = "auto"
    extra_bufts: bool | None = None  # None: the kernel check decides
    verify_mode: str = "auto"


@dataclass
class GenerationRequest:
    messages: list[dict]
    settings: GenerationSettings
    id: int = field(default_factory=lambda: next(_request_ids))
    cancel: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class StatsUpdate:
    """Steps since the last update (committed tokens and block size of each) + the latest."""

    steps: list[tuple[int, int]]
    latest: StepStats


class EngineWorker(QObject):
    # model state: "unloaded" | "loading" | "ready" | "failed"
    stateChanged = Signal(str, str)  # state, human message
    loaded = Signal(object)  # engine.events.EngineInfo
    loadFailed = Signal(str)
    drafterChanged = Signal(str)  # the drafter now in use
    drafterFailed = Signal(str)  # why the requested drafter could not be used
    busyChanged = Signal(bool)  # a generation is running
    textDelta = Signal(int, object)  # request id, list[Run]
    stepStats = Signal(int, object)  # request id, StatsUpdate
    finished = Signal(int, object)  # request id, engine.events.Finished
    error = Signal(int, str, str)  # request id, message, kind (engine.events.ErrorKind)
    # the local server: an API request started / ended (request id, what asked)
    serverJobStarted = Signal(int, str)
    serverJobEnded = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.engine = None  # engine.engine.Engine, touched only on the worker thread
        self.config: EngineConfig | None = None
        self._current: GenerationRequest | None = None

    # ----- called from the UI thread (thread-safe) --------------------------------------------

    def stop(self) -> None:
        request = self._current
        if request is not None:
            request.cancel.set()

    # ----- slots, run on the worker thread ------------------------------------------------------

    @Slot(object)
    def load(self, config: EngineConfig) -> None:
        from engine.engine import Engine

        self._close_engine()
        name = config.model or "the default model"
        self.stateChanged.emit("loading", f"Loading {name} and timing this machine…")
        try:
            # Load with no drafter first, so a drafter that does not fit this model costs
            # a message, not the whole load.
            engine = Engine(
                config.model,
                drafter="none",
                n_ctx=config.n_ctx,
                n_threads=config.n_threads,
                backend=config.backend,
                extra_bufts=config.extra_bufts,
                verify_mode=config.verify_mode,
                progress=lambda step: self.stateChanged.emit("loading", step.capitalize() + "…"),
            )
        except Exception as exc:  # noqa: BLE001 - any load failure must leave the app usable
            message = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            self.config = None
            self.stateChanged.emit("failed", message)
            self.loadFailed.emit(message)
            return
        self.engine, self.config = engine, config
        self._apply_drafter(config.drafter, fallback=FALLBACK_DRAFTER)
        self.loaded.emit(engine.info())  # before "ready": whoever sees ready has the info
        self.stateChanged.emit("ready", "Ready")

    @Slot(str)
    def setDrafter(self, spec: str) -> None:
        if self.engine is None:
            self.drafterFailed.emit("No model is loaded; the drafter applies at the next load.")
            return
        self._apply_drafter(spec, fallback=None)
        self.loaded.emit(self.engine.info())

    def _apply_drafter(self, spec: str, fallback: str | None) -> None:
        """The engine's drafter policy (Engine.set_drafter): a drafter that does not fit
        keeps the old one, or takes `fallback`; either way the user is told why."""
        try:
            note = self.engine.set_drafter(spec, fallback)
        except DrafterMismatchError as exc:
            note = str(exc)
        except Exception as exc:  # noqa: BLE001 - a broken drafter file keeps the old drafter
            note = f"The drafter '{spec}' could not be loaded: {exc}"
        if note:
            self.drafterFailed.emit(note)
        self.drafterChanged.emit(self.engine.drafter.name)

    @Slot(object)
    def generate(self, request: GenerationRequest) -> None:
        if self.engine is None:
            message = "No model is loaded. Choose a model (Models menu) and try again."
            self.error.emit(request.id, message, "model")
            return
        self._current = request
        self.busyChanged.emit(True)
        try:
            self._run(request)
        except Exception as exc:  # noqa: BLE001 - report, never kill the worker thread
            self.error.emit(request.id, f"Generation failed: {type(exc).__name__}: {exc}", "error")
        finally:
            self._current = None
            self.busyChanged.emit(False)

    def _run(self, request: GenerationRequest) -> None:
        events = self.engine.generate(
            request.messages, settings=request.settings, cancel=request.cancel
        )
        try:
            self._consume(request.id, events)
        finally:
            events.close()  # releases the engine's generation lock at once

    @Slot(object, object)
    def runServerJob(self, jobs, job) -> None:
        """One API request (engine.server.jobs.Job) whose turn has come. Its events go to the
        HTTP client and, as signals under a request id of their own, to the window."""
        if self.engine is None:
            jobs.refuse(job, "no model is loaded in the app")
            return
        if not jobs.take(job):
            return  # its client went away while it waited, or the server stopped
        request_id = next(_request_ids)
        self.serverJobStarted.emit(request_id, job.label)
        self.busyChanged.emit(True)
        events = jobs.run(self.engine, job)
        try:
            self._consume(request_id, events)
        except Exception as exc:  # noqa: BLE001 - report, never kill the worker thread
            self.error.emit(request_id, f"Generation failed: {type(exc).__name__}: {exc}", "error")
        finally:
            events.close()
            self.busyChanged.emit(False)
            self.serverJobEnded.emit(request_id)

    def _consume(self, request_id: int, events) -> None:
        runs: list[Run] = []
        steps: list[tuple[int, int]] = []
        latest: StepStats | None = None
        last_text = last_stats = 0.0

        def flush(now: float, stats: bool = True) -> None:
            nonlocal runs, steps, last_text, last_stats
            if runs:
                self.textDelta.emit(request_id, merge_runs(runs))
                runs = []
            last_text = now
            if stats and steps and latest is not None:
                self.stepStats.emit(request_id, StatsUpdate(steps, latest))
                steps = []
                last_stats = now

        for event in events:
            if isinstance(event, TextDelta):
                runs.append((event.text, event.drafted))
            elif isinstance(event, StepStats):
                steps.append((event.committed, event.block_size))
                latest = event
                now = time.monotonic()
                if now - last_text >= EMIT_INTERVAL_S:
                    flush(now, stats=now - last_stats >= STATS_INTERVAL_S)
            elif isinstance(event, Finished):
                flush(time.monotonic())
                self.finished.emit(request_id, event)
                return
            elif isinstance(event, ErrorEvent):
                flush(time.monotonic())
                self.error.emit(request_id, event.message, event.kind)
                return
        flush(time.monotonic())
        self.error.emit(request_id, "The engine ended without finishing the answer.", "error")

    def _close_engine(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


class EngineHost(QObject):
    """The worker plus its thread, with queued entry points for the UI.

    Signals below are connected to the worker's slots; since the worker lives on another
    thread, Qt queues each call there and the UI returns at once."""

    requestLoad = Signal(object)
    requestGenerate = Signal(object)
    requestDrafter = Signal(str)
    requestServerJob = Signal(object, object)  # JobQueue, Job

    def __init__(self) -> None:
        super().__init__()
        self.thread = QThread()
        self.thread.setObjectName("hyflash-engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self.requestLoad.connect(self.worker.load)
        self.requestGenerate.connect(self.worker.generate)
        self.requestDrafter.connect(self.worker.setDrafter)
        self.requestServerJob.connect(self.worker.runServerJob)
        self.state = "unloaded"
        self.state_message = "No model loaded"
        self.config: EngineConfig | None = None  # the last configuration asked for
        self.busy = False
        self.server_busy = False  # an API request is running
        self.info = None  # the loaded engine's EngineInfo, kept here for the UI thread
        self.worker.loaded.connect(self._on_loaded)
        self.worker.stateChanged.connect(self._on_state)
        self.worker.busyChanged.connect(self._on_busy)
        self.worker.serverJobStarted.connect(lambda _rid, _label: self._on_server_busy(True))
        self.worker.serverJobEnded.connect(lambda _rid: self._on_server_busy(False))
        self.thread.start()

    def _on_state(self, state: str, message: str) -> None:
        self.state, self.state_message = state, message
        if state != "ready":
            self.info = None

    def _on_loaded(self, info) -> None:
        self.info = info

    def _on_busy(self, busy: bool) -> None:
        self.busy = busy

    def _on_server_busy(self, busy: bool) -> None:
        self.server_busy = busy

    def load(self, config: EngineConfig) -> None:
        self.state = "loading"  # at once, so the UI does not see a stale "ready"
        self.state_message = "Loading the model…"
        self.info = None
        self.config = config
        self.requestLoad.emit(config)

    def generate(self, request: GenerationRequest) -> None:
        self.requestGenerate.emit(request)

    def run_server_job(self, jobs, job) -> None:
        """Queue an API request behind whatever the worker has queued (any thread)."""
        self.requestServerJob.emit(jobs, job)

    def set_drafter(self, spec: str) -> None:
        if self.config is not None:
            self.config = replace(self.config, drafter=spec)
        self.requestDrafter.emit(spec)

    def stop(self) -> None:
        self.worker.stop()

    def shutdown(self) -> None:
        """Stop any answer, end the thread, then free the model (no thread uses it by then).
        A load in progress cannot be interrupted, so this waits for it (a few seconds)."""
        self.worker.stop()
        self.thread.quit()
        self.thread.wait()
        self.worker._close_engine()


def disconnect_all(connections: list) -> None:
    """Disconnect (signal, slot) pairs, ignoring ones Qt has already dropped."""
    for signal, slot in connections:
        try:
            signal.disconnect(slot)
        except (RuntimeError, TypeError):
            pass
