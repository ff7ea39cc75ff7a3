"""The one queue in front of the engine.

Jobs run one at a time, in arrival order, on the thread that owns the Engine (the CLI's
EngineThread, or the app's worker thread). At most `max_waiting` jobs wait; past that
`submit` refuses (the HTTP side answers 503). The queue itself never touches the engine off
that thread: `submit` hands each job to `dispatch`, and the owning thread calls `take` and
`run` for it when its turn comes.
Each job carries its own cancel event (set by a client that went away, or by `close`) and a
sink that receives every event on the engine thread and must return at once.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from engine.events import (
    DrafterMismatchError,
    ErrorEvent,
    Event,
    Finished,
    GenerationSettings,
)

DEFAULT_MAX_WAITING = 16
_job_ids = itertools.count(1)


@dataclass(frozen=True)
class JobStarted:
    """The engine took the job: which model and drafter answer it."""

    model: str
    drafter: str


JobEvent = JobStarted | Event


@dataclass
class Job:
    prompt: str | list[dict]  # a raw prompt (raw=True) or a chat message list
    settings: GenerationSettings
    sink: Callable[[JobEvent], None]
    raw: bool = False
    drafter: str | None = None  # a drafter for this job only; None: the engine's
    prediction: str | None = None  # the answer the client expects (drafted from), if any
    label: str = ""  # what asked, for logs ("POST /v1/chat/completions")
    id: int = field(default_factory=lambda: next(_job_ids))
    cancel: threading.Event = field(default_factory=threading.Event)


class QueueFullError(Exception):
    pass


class QueueClosedError(Exception):
    pass


class JobQueue:
    def __init__(
        self, dispatch: Callable[[Job], None], max_waiting: int = DEFAULT_MAX_WAITING
    ) -> None:
        self.max_waiting = max_waiting
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._waiting: deque[Job] = deque()
        self._closed = False
        self.running: Job | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._closed:
                raise QueueClosedError("the server is shutting down")
            if len(self._waiting) >= self.max_waiting:
                raise QueueFullError(f"{self.max_waiting} requests are already waiting")
            self._waiting.append(job)
        self._dispatch(job)

    def discard(self, job: Job) -> None:
        """A job whose client went away: cancel it, and free its place if it still waits."""
        job.cancel.set()
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)

    def close(self) -> None:
        """Refuse new jobs, tell waiting ones the server stopped, cancel the running one."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
        for job in waiting:
            job.cancel.set()
            _send(job, ErrorEvent("the server is shutting down", kind="unavailable"))
        running = self.running
        if running is not None:
            running.cancel.set()

    def take(self, job: Job) -> bool:
        """On the engine's thread, when `job`'s turn comes: False if it was discarded or the
        queue closed meanwhile (then skip it), else it is the running job until `run` ends."""
        with self._lock:
            if job not in self._waiting:
                return False
            self._waiting.remove(job)
            self.running = job
            return True

    def refuse(self, job: Job, message: str) -> None:
        """Answer a job with an error instead of running it (no model to run it on)."""
        self.discard(job)
        _send(job, ErrorEvent(message, kind="unavailable"))

    def run(self, engine, job: Job) -> Iterator[JobEvent]:
        """On the engine's thread, after `take`: run the job, sending each event to its sink
        and yielding it too (the app's worker shows them in the window)."""
        ended = False
        try:
            for event in _job_events(engine, job):
                ended = isinstance(event, Finished | ErrorEvent)
                _send(job, event)
                yield event
        finally:
            self.running = None
            if not ended:  # the caller stopped early: never leave a client waiting
                _send(job, ErrorEvent("the engine stopped before finishing", kind="internal"))


def _send(job: Job, event: JobEvent) -> None:
    try:
        job.sink(event)
    except RuntimeError:  # the server's event loop is gone: nobody reads this job any more
        job.cancel.set()


def _job_events(engine, job: Job) -> Iterator[JobEvent]:
    try:
        with engine.use_drafter(job.drafter):
            yield JobStarted(engine.model_id, engine.drafter.name)
            events = engine.generate(
                job.prompt,
                raw=job.raw,
                settings=job.settings,
                cancel=job.cancel,
                prediction=job.prediction,
            )
            try:
                yield from events
            finally:
                events.close()  # releases the engine's generation lock at once
    except DrafterMismatchError as exc:
        yield ErrorEvent(str(exc), kind="drafter")
    except Exception as exc:  # noqa: BLE001 - a failed job must not kill the engine thread
        yield ErrorEvent(f"{type(exc).__name__}: {exc}", kind="internal")


class EngineThread:
    """A thread that owns an Engine and runs a JobQueue's jobs on it (`hyflash serve`)."""

    def __init__(self, engine, max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        self.engine = engine
        self._inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.jobs = JobQueue(self._inbox.put, max_waiting)
        self._thread = threading.Thread(target=self._loop, name="hyflash-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._inbox.get()) is not None:
            if self.jobs.take(job):
                for _event in self.jobs.run(self.engine, job):
                    pass

    def stop(self) -> None:
        self.jobs.close()
        self._inbox.put(None)
        self._thread.join()
