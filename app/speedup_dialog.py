"""The "Speed up this model…" dialog: the plan of a speed-up job (time on this computer,
disk, device), Start, then its progress (stage, bar, ETA, live training loss), Pause / Resume /
Cancel, and the end state. The job itself runs in a child process (app.speedup_job)."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app import theme
from app.speedup_job import (
    USER_BUDGETS,
    JobError,
    Loss,
    Plan,
    Progress,
    Result,
    SpeedupJob,
    StageEvent,
    StagePlan,
    speedup_argv,
    train_extra_missing,
    unfinished_job,
)
from engine.speedup.plan import BLOCK
from engine.units import format_size

STAGE_NAMES = {
    "plan": "Planning",
    "answers": "The model answers training prompts",
    "heldout": "The model answers held-out prompts",
    "features": "Reading the model's features",
    "train": "Training the drafter",
    "export": "Exporting the drafter",
    "validate": "Measuring acceptance against n-gram lookup",
    "install": "Installing the drafter",
}
MAX_LOSS_POINTS = 2000
RESUME_NOTE = (
    "The work so far is kept; Resume continues from where it stopped, also after the app is "
    "restarted."
)


def stage_name(stage: str) -> str:
    return STAGE_NAMES.get(stage, stage.capitalize())


def format_duration(seconds: float) -> str:
    """A rough, readable duration: 40 s, 12 min, 1 h 20 min."""
    if seconds < 60:
        return f"{max(seconds, 1):.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def result_text(result: Result) -> str:
    """The end state: what was installed and what it should bring here, then the job's own
    reason (how many held-out answers decided it, a shipped drafter that comes first)."""
    tau = f"τ {result.tau:.2f} vs n-gram {result.ngram_tau:.2f} at block {BLOCK}"
    if result.installed:
        speed = (
            f"expected ~{result.expected_speedup:.2f}x on this machine"
            if result.expected_speedup is not None
            else "its speed-up on this machine was not measured"
        )
        text = f"HyFlash drafter installed: {tau}, {speed}."
    else:
        text = f"No drafter installed: {tau}. The trained files are kept in {result.drafter_dir}."
    reason = result.reason.rstrip(".")
    return f"{text}\n{reason[:1].upper()}{reason[1:]}." if reason else text


def _work(plan: Plan) -> list[StagePlan]:
    """The stages after the plan: what Start runs (the plan was made before it)."""
    return [s for s in plan.stages if s.name != "plan"]


class LossPlot(QWidget):
    """Training loss per step, as it arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(90)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.points: list[tuple[int, float]] = []

    def add(self, step: int, loss: float) -> None:
        while self.points and self.points[-1][0] >= step:  # resumed from an earlier checkpoint
            self.points.pop()
        self.points.append((step, loss))
        del self.points[:-MAX_LOSS_POINTS]
        self.update()

    def paintEvent(self, _event) -> None:  # noqa: N802
        c = theme.colors()
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(4, 6, -4, -6)
        p.setPen(QColor(c.border))
        p.drawRect(rect)
        if len(self.points) < 2:
            p.setPen(QColor(c.muted))
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, "training loss appears here")
            return
        steps = [s for s, _ in self.points]
        losses = [v for _, v in self.points]
        x0, x1 = steps[0], max(steps[-1], steps[0] + 1)
        lo, hi = min(losses), max(losses)
        hi = hi if hi > lo else lo + 1.0
        path = QPainterPath()
        for i, (s, v) in enumerate(self.points):
            point = QPointF(
                rect.left() + (s - x0) / (x1 - x0) * rect.width(),
                rect.bottom() - (v - lo) / (hi - lo) * rect.height(),
            )
            path.lineTo(point) if i else path.moveTo(point)
        pen = QPen(QColor(c.plot_line))
        pen.setWidthF(1.5)
        p.setPen(pen)
        p.drawPath(path)


class SpeedupDialog(QDialog):
    """States: planning -> ready -> running -> (pausing -> paused -> running) -> finished or
    failed; cancelling closes the dialog; unavailable when this Python cannot train or the
    plan was refused. A stopped job keeps its state on disk and resumes where it stopped."""

    closedWith = Signal(str, str)  # model id, what the model manager should say about it

    def __init__(
        self,
        model_id: str,
        model_name: str,
        budgets: tuple[str, ...] = USER_BUDGETS,
        parent=None,
    ) -> None:
        super().__init__(parent)
        self.model_id = model_id
        self.state = "planning"
        self.plan: Plan | None = None
        self.result: Result | None = None
        self.error: JobError | None = None
        self.finished_stages: set[str] = set()
        self.stage: str | None = None
        self.stage_fraction = 0.0
        self.stage_eta: float | None = None
        self.setWindowTitle(f"Speed up {model_name}")
        self.setMinimumWidth(560)
        col = QVBoxLayout(self)
        intro = QLabel(
            "Trains a HyFlash drafter for this model on this computer: the model answers "
            "training prompts, a small drafter learns to predict its next tokens, and it is "
            "installed only if it drafts better than n-gram lookup. Answers stay exactly the "
            "model's own; only the speed changes. A stopped job resumes where it stopped."
        )
        intro.setObjectName("Muted")
        intro.setWordWrap(True)
        col.addWidget(intro)

        form = QFormLayout()
        self.budget = QComboBox()
        self.budget.addItems(list(budgets))
        resume = unfinished_job(model_id)  # open on the job that stopped, to continue it
        if resume:
            if self.budget.findText(resume) < 0:
                self.budget.addItem(resume)
            self.budget.setCurrentText(resume)
        self.budget.currentTextChanged.connect(lambda _text: self.request_plan())
        form.addRow("Budget", self.budget)
        self.eta = QLabel("–")
        form.addRow("Time", self.eta)
        self.device = QLabel("–")
        form.addRow("Device", self.device)
        self.needs = QLabel("–")
        form.addRow("Needs", self.needs)
        self.stages = QLabel("–")
        self.stages.setWordWrap(True)
        form.addRow("Steps", self.stages)
        col.addLayout(form)

        self.progress_box = QWidget()
        box = QVBoxLayout(self.progress_box)
        box.setContentsMargins(0, 6, 0, 0)
        self.stage_label = QLabel()
        box.addWidget(self.stage_label)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        box.addWidget(self.bar)
        self.remaining = QLabel()
        self.remaining.setObjectName("Muted")
        box.addWidget(self.remaining)
        self.loss = QLabel("Training loss: –")
        box.addWidget(self.loss)
        self.loss_plot = LossPlot()
        box.addWidget(self.loss_plot)
        col.addWidget(self.progress_box)

        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(self.message)

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.start_button = QPushButton("Start")
        self.start_button.setObjectName("Primary")
        self.pause_button = QPushButton("Pause")
        self.cancel_button = QPushButton("Cancel")
        self.close_button = QPushButton("Close")
        for b in (self.start_button, self.pause_button, self.cancel_button, self.close_button):
            buttons.addWidget(b)
        col.addLayout(buttons)
        self.start_button.clicked.connect(self.start)
        self.pause_button.clicked.connect(self.pause_or_resume)
        self.cancel_button.clicked.connect(self.reject)
        self.close_button.clicked.connect(self.close)

        self.job = SpeedupJob(self)
        self.job.event.connect(self._on_event)
        self.job.ended.connect(self._on_ended)
        self.missing = train_extra_missing()
        if self.missing:
            self._set_state("unavailable", self.missing)
        else:
            self.request_plan()

    # ----- actions ----------------------------------------------------------------------------

    def request_plan(self) -> None:
        """Ask the engine what the job would do here (a short child run, no training)."""
        if self.job.running or self.missing:
            return
        self.plan = None
        self._set_state("planning", "Measuring what this computer needs…")
        self.job.start(self._argv(plan_only=True))

    def start(self) -> None:
        """Start the job, or resume it where its saved state stopped."""
        self.result, self.error = None, None
        self.stage, self.stage_fraction, self.stage_eta = None, 0.0, None
        self.finished_stages = set(self.plan.done_stages) if self.plan else set()
        self._set_state("running", "")
        self._show_progress()
        self.job.start(self._argv(plan_only=False))

    def pause_or_resume(self) -> None:
        if self.state == "running":
            self._set_state("pausing", "Pausing: saving the work so far…")
            self.job.stop()
        elif self.state == "paused":
            self.start()

    def reject(self) -> None:
        """Cancel, Esc and the window's close button: a running job is stopped first (its
        state saved, resumable) and the dialog closes when the child has exited."""
        if self.state in ("running", "pausing"):
            self._set_state("cancelling", "Stopping: saving the work so far…")
            self.job.stop()
        elif self.state != "cancelling":
            super().reject()

    def done(self, result: int) -> None:
        self.job.shutdown()  # a plan being made, or the app quitting: wait here
        if self.state in ("running", "pausing", "paused", "cancelling"):
            said = (
                "Speed-up stopped. The work so far is kept: Resume speed-up… continues from "
                "where it stopped."
            )
        else:
            said = self.message.text() if self.state in ("finished", "failed") else ""
        self.closedWith.emit(self.model_id, said)
        super().done(result)

    # ----- the child's events -----------------------------------------------------------------

    def _argv(self, plan_only: bool) -> list[str]:
        return speedup_argv(self.model_id, self.budget.currentText(), plan_only)

    def _on_event(self, event) -> None:
        if isinstance(event, Plan):
            self.plan = event
            self._show_plan(event)
        elif isinstance(event, StageEvent):
            if event.status == "start":
                self.stage, self.stage_fraction, self.stage_eta = event.stage, 0.0, None
            else:
                self.finished_stages.add(event.stage)
            self._show_progress()
        elif isinstance(event, Progress) and self.state == "planning":
            # the plan measures this machine first (a few minutes, once per model)
            self.message.setText(
                f"Measuring this computer's speed with this model: {event.done:g} of "
                f"{event.total:g} {event.unit}…"
            )
        elif isinstance(event, Progress):
            self.stage = event.stage
            self.stage_fraction = event.done / event.total if event.total else 0.0
            self.stage_eta = event.eta_s
            self._show_progress(f"{event.done:g} of {event.total:g} {event.unit}".rstrip())
        elif isinstance(event, Loss):
            self.loss.setText(
                f"Training loss: {event.loss:.3f} (step {event.step} of {event.steps})"
            )
            self.loss_plot.add(event.step, event.loss)
        elif isinstance(event, Result):
            self.result = event
        elif isinstance(event, JobError):
            self.error = event

    def _on_ended(self, code: int, stderr: str) -> None:
        if self.state == "planning":
            if code == 0 and self.plan is not None:
                done = set(self.plan.done_stages) - {"plan"}  # the plan is made every time
                left = {s.name for s in self.plan.stages} - done - {"plan"}
                label = "Start" if not done else "Resume" if left else "Show result"
                self.start_button.setText(label)
                self._set_state("ready", RESUME_NOTE if done and left else "")
            else:
                self._set_state("unavailable", self._failure(code, stderr))
        elif self.state == "pausing":
            self._set_state("paused", f"Paused. {RESUME_NOTE}")
        elif self.state == "cancelling":
            super().reject()
        elif code == 0 and self.result is not None:
            self._set_state("finished", result_text(self.result))
            self.stage_label.setText("Done")
            self.bar.setValue(1000)
            took = sum(self.result.stage_seconds.values())
            self.remaining.setText(f"Took {format_duration(took)}" if took else "")
        elif self.error is not None and self.error.kind == "cancelled":  # stopped from outside
            self._set_state("paused", f"Stopped. {RESUME_NOTE}")
        else:
            self._set_state("failed", self._failure(code, stderr))

    def _failure(self, code: int, stderr: str) -> str:
        if self.error is not None:
            if self.error.kind == "missing_train_extra":
                return train_extra_missing() or self.error.message
            if self.error.kind == "locked":
                return (
                    "A speed-up of this model is already running (in another window or a "
                    f"terminal): {self.error.message}"
                )
            return self.error.message
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        return f"The speed-up job failed (exit code {code}). {last}".strip()

    # ----- view -------------------------------------------------------------------------------

    def _show_plan(self, plan: Plan) -> None:
        self.budget.blockSignals(True)  # a resumed job keeps the budget it started with
        if self.budget.findText(plan.budget) < 0:
            self.budget.addItem(plan.budget)
        self.budget.setCurrentText(plan.budget)
        self.budget.blockSignals(False)
        work = _work(plan)
        left = sum(s.eta_s for s in work if s.name not in plan.done_stages)
        self.eta.setText(f"about {format_duration(left)} on this computer")
        self.device.setText(plan.device or "–")
        self.needs.setText(
            f"{format_size(plan.disk_bytes)} of disk, {format_size(plan.ram_bytes)} of memory"
        )
        self.stages.setText(
            "<br>".join(
                f"{stage_name(s.name)}: "
                + ("done" if s.name in plan.done_stages else format_duration(s.eta_s))
                for s in work
            )
        )
        self.adjustSize()  # the list of steps arrives after the window was laid out

    def _show_progress(self, detail: str = "") -> None:
        plan = self.plan
        work = _work(plan) if plan else []
        names = [s.name for s in work]
        if self.stage is None:
            self.stage_label.setText("Starting…")
        else:
            index = (
                f"Step {names.index(self.stage) + 1} of {len(names)}: "
                if self.stage in names
                else ""
            )
            text = f"{index}{stage_name(self.stage)}"
            self.stage_label.setText(f"{text} · {detail}" if detail else text)
        if plan is None:
            return
        # the bar and the ETA weigh each stage by its planned time
        total = sum(s.eta_s for s in work) or 1.0
        done = sum(s.eta_s for s in work if s.name in self.finished_stages)
        left = 0.0
        for s in work:
            if s.name in self.finished_stages:
                continue
            if s.name == self.stage:
                done += self.stage_fraction * s.eta_s
                left += (
                    self.stage_eta
                    if self.stage_eta is not None
                    else (1 - self.stage_fraction) * s.eta_s
                )
            else:
                left += s.eta_s
        self.bar.setValue(int(1000 * min(done / total, 1.0)))
        self.remaining.setText(f"About {format_duration(left)} left")

    def _set_state(self, state: str, message: str) -> None:
        self.state = state
        self.message.setText(message)
        running = state in ("running", "pausing", "cancelling")
        shown = running or state in ("paused", "finished", "failed")
        if shown == self.progress_box.isHidden():
            self.progress_box.setVisible(shown)
            self.adjustSize()
        self.budget.setEnabled(state in ("ready", "failed", "unavailable") and not self.missing)
        self.start_button.setVisible(state in ("planning", "ready", "failed"))
        self.start_button.setEnabled(state != "planning")
        if state == "failed":
            self.start_button.setText("Retry")
        self.pause_button.setVisible(state in ("running", "pausing", "paused"))
        self.pause_button.setEnabled(state in ("running", "paused"))
        self.pause_button.setText({"pausing": "Pausing…", "paused": "Resume"}.get(state, "Pause"))
        self.cancel_button.setVisible(state in ("running", "cancelling", "paused"))
        self.cancel_button.setEnabled(state != "cancelling")
        self.close_button.setVisible(not running)
