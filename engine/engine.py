"""Engine: a loaded target, a drafter and the block-size chooser behind one generator API."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.decoding.blocksize import (
    DEFAULT_MAX_BLOCK,
    MAX_BLOCK_SIZE,
    BlockSizeChooser,
    CostModel,
    profile_costs,
)
from engine.decoding.drafter_protocol import Drafter
from engine.decoding.speculative import generate_tokens
from engine.drafters import NoDrafter
from engine.drafters.make import make_drafter
from engine.drafters.prediction import PredictionDrafter, prediction_usage
from engine.events import (
    DEFAULT_N_CTX,
    DrafterMismatchError,
    EngineError,
    EngineInfo,
    ErrorEvent,
    Event,
    Finished,
    GenerationSettings,
)
from engine.llama.backends import choose, probe
from engine.llama.chat_template import ChatTemplate
from engine.llama.draft_model import DraftModelDrafter
from engine.llama.kernels import decide, requested_verify_mode
from engine.llama.target import LlamaTarget, default_threads
from engine.models.resolve import resolve_target
from engine.options import FALLBACK_DRAFTER


class Engine:
    def __init__(
        self,
        model: str | Path | None = None,
        *,
        drafter: str = FALLBACK_DRAFTER,  # why not the surfaces' "hyflash": engine.options
        fallback: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        backend: str | None = None,
        max_block: int = DEFAULT_MAX_BLOCK,
        profile: bool = True,
        progress: Callable[[str], None] | None = None,
        extra_bufts: bool | None = None,
        verify_mode: str | None = None,
    ) -> None:
        """Load the target (and time this machine's verify cost unless profile=False), then
        its drafter: one that does not fit the target raises DrafterMismatchError and nothing
        stays loaded, unless `fallback` names the drafter to take instead (drafter_note then
        says why, in a line for the user; set_drafter).
        `progress` receives short status lines while loading. extra_bufts forces llama.cpp's
        extra buffer types on or off (None: the kernel check decides); verify_mode is auto,
        exact or fast (None: $HYFLASH_VERIFY, else auto); see engine.llama.kernels."""
        report = progress or (lambda message: None)
        report("finding the model")
        self.model_id, self.model_path = resolve_target(model)
        self.backend = choose(probe(), backend, model_bytes=self.model_path.stat().st_size)
        requested_mode = requested_verify_mode(verify_mode)
        threads = n_threads or default_threads()
        self.kernels = decide(
            self.model_path,
            n_threads=threads,
            n_gpu_layers=self.backend.n_gpu_layers,
            extra_bufts=extra_bufts,
            progress=report,
        )
        report(f"loading {self.model_path.name} ({self.backend.name})")
        self.target = LlamaTarget(
            self.model_path,
            n_ctx=n_ctx,
            n_threads=threads,
            n_gpu_layers=self.backend.n_gpu_layers,
            kernels=self.kernels,
        )
        self.template = ChatTemplate.for_target(self.target)
        self.max_block = min(max_block, MAX_BLOCK_SIZE)
        self.verify = self.kernels.verify_plan(requested_mode)
        if profile:
            report("timing this machine's verify cost")
        self.cost = CostModel(profile_costs(self.timed_decode)) if profile else None
        self.drafter: Drafter = NoDrafter()
        self.chooser: BlockSizeChooser | None = None
        # one chooser per drafter, kept across switches: what it learnt about that drafter's
        # proposals (and the machine, in the shared cost model) holds from answer to answer
        self._choosers: dict[str, BlockSizeChooser] = {}
        # the last draft model loaded, kept while others draft: loading one reads its weights,
        # and a benchmark or a server request switches back and forth
        self._draft_model: DraftModelDrafter | None = None
        report(f"loading the {drafter} drafter")
        try:
            self.drafter_note = self.set_drafter(drafter, fallback)
        except BaseException:
            self.target.close()
            raise
        self._lock = threading.Lock()

    # ----- configuration --------------------------------------------------------------------

    def set_verify_mode(self, mode: str) -> None:
        """auto | exact | fast, without reloading (engine.llama.kernels.VerifyPlan)."""
        self.verify = self.kernels.verify_plan(requested_verify_mode(mode))

    def set_drafter(self, spec: str, fallback: str | None = None) -> str | None:
        """Switch drafters without reloading the target. A drafter that does not fit it
        (DrafterMismatchError) keeps the old one; with `fallback`, that one is taken instead
        and the return value says why, in a line for the user (None: `spec` is in use). This
        is how the CLI, the server and the app fall back: the model is loaded and timed once,
        with no drafter, and only the drafter is swapped."""
        note = None
        try:
            drafter = self._make_drafter(spec)
        except DrafterMismatchError as exc:
            if fallback is None or fallback == spec:
                raise
            drafter = make_drafter(fallback, self.model_id, self.target, self.backend)
            note = f"{exc} Using the {fallback} drafter instead."
        self._use(drafter)
        return note

    def _make_drafter(self, spec: str) -> Drafter:
        kept = self._draft_model
        if kept is not None and kept.name == spec:
            return kept
        drafter = make_drafter(spec, self.model_id, self.target, self.backend)
        if isinstance(drafter, DraftModelDrafter):
            self._close_draft_model()
            self._draft_model = drafter
        return drafter

    def _close_draft_model(self) -> None:
        if self._draft_model is not None and self._draft_model is not self.drafter:
            self._draft_model.close()
        self._draft_model = None

    def _use(self, drafter: Drafter) -> None:
        self.drafter = drafter
        if self.cost is None:
            self.chooser = None
            return
        if drafter.name not in self._choosers:
            self._choosers[drafter.name] = BlockSizeChooser(self.cost, self.max_block)
        self.chooser = self._choosers[drafter.name]

    @contextmanager
    def use_drafter(self, spec: str | None) -> Iterator[None]:
        """Draft with `spec` for a while (one server request), then put the engine's own
        drafter back, with what its block-size chooser has learned; None keeps the current."""
        if spec is None or spec == self.drafter.name:
            yield
            return
        saved = self.drafter, self.chooser
        self.set_drafter(spec)
        try:
            yield
        finally:
            self.drafter, self.chooser = saved

    def info(self) -> EngineInfo:
        return EngineInfo(
            model_id=self.model_id,
            model_path=str(self.model_path),
            n_ctx=self.target.n_ctx,
            n_threads=self.target.n_threads,
            backend=self.backend.name,
            backend_reason=self.backend.reason,
            drafter=self.drafter.name,
            model_bytes=self.target.model_size_bytes(),
            kv_bytes_per_token=self.target.kv_bytes_per_token(),
            kernels=tuple(self.kernels.summary()),
            verify_mode=self.verify.mode,
            verify_chunk=self.verify.chunk or 0,
            verify_reason=self.verify.reason,
        )

    def timed_decode(self, n: int) -> None:
        # the cost of verifying n tokens as the loop does: in chunks where exactness needs them
        start = self.target.n_past
        step = self.verify.chunk or n
        for i in range(0, n, step):
            self.target.decode([self.target.bos_token] * min(step, n - i))
        self.target.truncate(start)

    # ----- prompts --------------------------------------------------------------------------

    def chat_tokens(self, messages: list[dict]) -> list[int]:
        return self.template.tokenize(self.target, messages)

    def raw_tokens(self, text: str) -> list[int]:
        return self.target.tokenize(text, add_special=True, parse_special=True)

    # ----- generation -----------------------------------------------------------------------

    def generate(
        self,
        prompt: str | list[dict],
        *,
        raw: bool = False,
        system: str | None = None,
        settings: GenerationSettings | None = None,
        cancel: threading.Event | None = None,
        prediction: str | None = None,
    ) -> Iterator[Event]:
        """Chat (a user message or a message list) or raw completion of a text; yields events
        (bad input: one ErrorEvent of kind "input"). `prediction`: the answer the caller
        expects, drafted from where it matches (engine.drafters.prediction); the answer is the
        same without it."""
        settings = settings or GenerationSettings()
        if isinstance(prompt, str):
            if not prompt.strip():
                yield ErrorEvent("the prompt is empty", kind="input")
                return
            messages = [{"role": "user", "content": prompt}]
        elif raw:
            yield ErrorEvent(
                "a raw completion takes a text prompt, not a message list", kind="input"
            )
            return
        else:
            messages = list(prompt)
        if system and not raw:
            messages = [{"role": "system", "content": system}, *messages]
        try:
            tokens = self.raw_tokens(prompt) if raw else self.chat_tokens(messages)
            predicted = self._prediction_tokens(prediction)
        except EngineError as exc:
            yield ErrorEvent(str(exc), kind="input")
            return
        drafter = PredictionDrafter(self.drafter, predicted) if predicted else self.drafter
        with self._lock:  # one generation at a time on one KV cache
            try:
                for event in generate_tokens(
                    self.target,
                    drafter,
                    tokens,
                    settings,
                    chooser=self._chooser_for(drafter),
                    cancel=cancel,
                    verify_chunk=self.verify.chunk,
                    verify_mode=self.verify.mode,
                ):
                    if isinstance(event, Finished) and prediction is not None:
                        counts = prediction_usage(predicted, event.token_ids)
                        event = dataclasses.replace(event, prediction_tokens=counts)
                    yield event
            except EngineError as exc:
                yield ErrorEvent(str(exc))

    def _chooser_for(self, drafter: Drafter) -> BlockSizeChooser | None:
        """The block-size chooser of this generation's drafter. Behind a prediction the same
        drafter gets a chooser of its own: there it mostly proposes copies, and the history of
        its answers without one (mostly empty proposals) would outweigh them in the mix of
        kinds that decides whether a call is worth making."""
        if self.cost is None or drafter is self.drafter:
            return self.chooser
        key = f"{drafter.name}+prediction"
        if key not in self._choosers:
            self._choosers[key] = BlockSizeChooser(self.cost, self.max_block)
        return self._choosers[key]

    def _prediction_tokens(self, prediction: str | None) -> list[int]:
        if not prediction:
            return []
        predicted = self.target.tokenize(prediction, add_special=False, parse_special=False)
        if len(predicted) > self.target.n_ctx:
            raise EngineError(
                f"the prediction is {len(predicted)} tokens, longer than the model's whole "
                f"context ({self.target.n_ctx} tokens)"
            )
        return predicted

    def close(self) -> None:
        if self._draft_model is not None:
            self._draft_model.close()
            self._draft_model = None
        self.target.close()
