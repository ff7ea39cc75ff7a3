"""Engine: a loaded target, a drafter and the block-size chooser behind one generator API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.backends import BackendChoice, choose, probe
from engine.blocksize import (
    DEFAULT_MAX_BLOCK,
    MAX_BLOCK_SIZE,
    BlockSizeChooser,
    CostModel,
    profile_costs,
)
from engine.catalog import load_catalog
from engine.chat_template import ChatTemplate
from engine.drafters import DRAFTER_CHOICES, NgramDrafter, NoDrafter
from engine.drafters.base import Drafter
from engine.events import (
    DEFAULT_N_CTX,
    DrafterMismatchError,
    EngineError,
    ErrorEvent,
    Event,
    GenerationSettings,
)
from engine.kernels import decide, requested_verify_mode
from engine.models import resolve_target
from engine.paths import resources_dir
from engine.speculative import generate_tokens
from engine.target import LlamaTarget, default_threads
from engine.user_drafters import find_drafter


@dataclass(frozen=True)
class EngineInfo:
    model_id: str
    model_path: str
    n_ctx: int
    n_threads: int
    backend: str
    backend_reason: str
    drafter: str
    model_bytes: int
    kv_bytes_per_token: int
    kernels: tuple[str, ...]  # what the kernel check found, one line per configuration
    verify_mode: str  # "exact" | "fast"
    verify_chunk: int  # most rows per verify decode; 0 = whole blocks
    verify_reason: str


def hyflash_drafter_dir(model_id: str, model_path: Path | None = None) -> Path:
    """The folder of a model's HyFlash drafter: the one shipped for a catalog model, else one
    `hyflash speedup` installed for its GGUF (found by the catalog's pinned sha256 or by the
    file at model_path), or a clear error."""
    entry = load_catalog().get(model_id)
    if entry is not None and entry.drafter:
        folder = resources_dir() / "drafters" / entry.drafter
        if (folder / "card.json").exists():
            return folder
    pinned = entry.source.get("sha256") if entry is not None else None
    if pinned or model_path is not None:
        user = find_drafter(sha256=pinned, gguf=model_path)
        if user is not None:
            return user
    if entry is None or not entry.drafter:
        raise DrafterMismatchError(
            f"No HyFlash drafter exists for the model '{model_id}' (`hyflash speedup --model "
            f"{model_path or model_id}` trains one)."
        )
    raise DrafterMismatchError(
        f"The HyFlash drafter '{entry.drafter}' for '{model_id}' is not installed. "
        "Choose the n-gram drafter or none."
    )


def hyflash_status(model_id: str, model_path: Path | None = None) -> tuple[bool, str]:
    """(available, why not) for the HyFlash drafter of a model, without loading it."""
    try:
        hyflash_drafter_dir(model_id, model_path)
    except DrafterMismatchError as exc:
        return False, str(exc)
    return True, ""


def make_drafter(
    spec: str, model_id: str, target: LlamaTarget, backend: BackendChoice | None = None
) -> Drafter:
    """'none', 'ngram', 'hyflash' (the drafter for this target: shipped, else installed by
    `hyflash speedup`), a drafter path, or
    'hybrid:<one of those>' (n-gram lookup on a 3-token match, else that drafter). A learned
    drafter may name its weights: 'hyflash@int8' (fp32 | int8 | int4; default: the card's)."""
    if spec == "none":
        return NoDrafter()
    if spec == "ngram":
        return NgramDrafter()
    if spec.startswith("hybrid:"):
        from engine.drafters.hybrid import HybridDrafter

        return HybridDrafter(make_drafter(spec.split(":", 1)[1], model_id, target, backend))
    spec, _, weights = spec.partition("@")
    path = hyflash_drafter_dir(model_id, target.path) if spec == "hyflash" else Path(spec)
    if not path.exists():
        raise DrafterMismatchError(
            f"Unknown drafter '{spec}': use one of {', '.join(DRAFTER_CHOICES)} or a drafter folder"
        )
    from engine.drafters.hyflash import HyFlashDrafter  # onnxruntime only when used

    providers = list(backend.drafter_providers) if backend else None
    return HyFlashDrafter.load(path, target, providers=providers, weights=weights or None)


class Engine:
    def __init__(
        self,
        model: str | Path | None = None,
        *,
        drafter: str = "ngram",
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        backend: str | None = None,
        max_block: int = DEFAULT_MAX_BLOCK,
        profile: bool = True,
        progress: Callable[[str], None] | None = None,
        extra_bufts: bool | None = None,
        verify_mode: str | None = None,
    ) -> None:
        """Load the target (and time this machine's verify cost unless profile=False); a
        drafter that does not fit the target raises DrafterMismatchError, nothing stays loaded.
        `progress` receives short status lines while loading. extra_bufts forces llama.cpp's
        extra buffer types on or off (None: the kernel check decides); verify_mode is auto,
        exact or fast (None: $HYFLASH_VERIFY, else auto); see engine.kernels."""
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
        self.verify = self.kernels.verify_plan(requested_mode, self.max_block)
        if profile:
            report("timing this machine's verify cost")
        self.cost = CostModel(profile_costs(self._timed_decode)) if profile else None
        self.drafter: Drafter = NoDrafter()
        self.chooser: BlockSizeChooser | None = None
        # one chooser per drafter, kept across switches: what it learnt about that drafter's
        # proposals (and the machine, in the shared cost model) holds from answer to answer
        self._choosers: dict[str, BlockSizeChooser] = {}
        report(f"loading the {drafter} drafter")
        try:
            self.set_drafter(drafter)
        except BaseException:
            self.target.close()
            raise
        self._lock = threading.Lock()

    # ----- configuration --------------------------------------------------------------------

    def set_verify_mode(self, mode: str) -> None:
        """auto | exact | fast, without reloading (engine.kernels.VerifyPlan)."""
        self.verify = self.kernels.verify_plan(requested_verify_mode(mode), self.max_block)

    def set_drafter(self, spec: str) -> None:
        """Switch drafters without reloading the target; a mismatch keeps the old one."""
        self.drafter = make_drafter(spec, self.model_id, self.target, self.backend)
        if self.cost is None:
            self.chooser = None
            return
        if self.drafter.name not in self._choosers:
            self._choosers[self.drafter.name] = BlockSizeChooser(self.cost, self.max_block)
        self.chooser = self._choosers[self.drafter.name]

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

    def _timed_decode(self, n: int) -> None:
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
    ) -> Iterator[Event]:
        """Chat (a user message or a message list) or raw completion of a text; yields events
        (bad input: one ErrorEvent of kind "input")."""
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
        except EngineError as exc:
            yield ErrorEvent(str(exc), kind="input")
            return
        with self._lock:  # one generation at a time on one KV cache
            try:
                yield from generate_tokens(
                    self.target,
                    self.drafter,
                    tokens,
                    settings,
                    chooser=self.chooser,
                    cancel=cancel,
                    verify_chunk=self.verify.chunk,
                    verify_mode=self.verify.mode,
                )
            except EngineError as exc:
                yield ErrorEvent(str(exc))

    def close(self) -> None:
        self.target.close()
