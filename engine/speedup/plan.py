"""What a `hyflash speedup` job takes, without torch (the app asks for the plan where the
[train] extra may be missing): the budgets, which GGUF architectures the training side loads,
the model's shape from its header, and each stage's time, disk and memory from this machine's
calibration (engine/speedup/calibrate.py).

Budgets scale the shipped recipe (v4: causal slots, copy trust 0.2, block 16, d=384 x 1 layer,
window 64, Mamba-2 memory, 8,192-token draft vocabulary) by its data and steps. `quick` is
sized from the learning curves (docs/RESULTS.md): 150 self-distilled answers and 300 steps
walked tau 2.22-2.23 at B=16 against n-gram's 2.17 on SmolLM2-135M, 75 answers fell below it;
trimmed to 140 answers and 280 steps to fit 20 minutes there (session 27's 150 / 300 took 20.3).
`tiny` is for tests: the whole pipeline in a few minutes, its drafter not meant to be used.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf

from engine.events import EngineError
from engine.llama.gguf_file import EMBED_NAME, GGUFIndex
from engine.units import format_size

STAGES = ("plan", "answers", "heldout", "features", "train", "export", "validate", "install")

# decoder-only architectures whose GGUF transformers loads into a model TorchTarget drives
# (model.model.layers, a final norm, lm_head) and llama.cpp runs; checked: llama (SmolLM2),
# qwen2 (Qwen2.5-Coder), gemma3 (Gemma-3-270M)
SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")

# what the [train] extra brings that the job imports (pyproject.toml)
TRAIN_MODULES = ("torch", "onnx", "onnxscript", "transformers", "accelerate")

BLOCK = 16  # the recipe's block size: tau is compared with n-gram's there
EVAL_SETS = 6  # held-out prompt sets (engine/bench/corpora.py eval_prompts)
LARGE_VOCAB = 100_000


def draft_vocab_size(vocab_size: int) -> int:
    """The draft head's vocabulary: the recipe's 8,192 tokens, 16,384 for a target vocabulary
    over 100K (Qwen2.5's 152K: the 8K most frequent ids of its 4,555 training answers cover
    93.4% of the held-out answer tokens, 16K 96.9%, 32K 98.5%; `hyflash data vocab-coverage`,
    docs/bench/qwen-coder/vocab-coverage)."""
    return min(16_384 if vocab_size > LARGE_VOCAB else 8_192, vocab_size)


class SpeedupError(EngineError):
    """A job that cannot go on; `kind` tells the app which (the JSON error's kind)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Budget:
    name: str
    answers: int  # self-distilled training answers
    answer_tokens: int  # most new tokens per training answer
    conversations: int  # ShareGPT answers labelled by the target (the recipe's extra corpus)
    heldout_per_set: int  # held-out answers per evaluation set
    heldout_tokens: int
    steps: int
    eval_every: int  # validation and checkpoint interval (a kill loses at most this many steps)

    @property
    def heldout(self) -> int:
        return self.heldout_per_set * EVAL_SETS


BUDGETS = {
    b.name: b
    for b in (
        Budget("tiny", 16, 48, 4, 1, 48, 16, 4),
        Budget("quick", 140, 384, 100, 2, 256, 280, 28),
        Budget("standard", 600, 384, 400, 4, 256, 1000, 100),
        Budget("thorough", 2400, 384, 1000, 12, 256, 3000, 250),
    )
}
BUDGET_HELP = (
    "quick: about 140 answers and 280 training steps (~20 min for SmolLM2-135M on 2 CPU "
    "cores); standard: 4x the answers, 1,000 steps; thorough: the shipped drafters' scale "
    "(2,400 answers, 3,000 steps); tiny: the tests' smoke run of the pipeline, whose drafter "
    "is not meant to be used"
)

# corpus shapes measured on SmolLM2's committed corpus (data/distill/): answers fill ~75% of
# their token cap, chat-templated prompts ~90 tokens (held-out ~110), ShareGPT answers ~330
ANSWER_FILL = 0.75
PROMPT_TOKENS = 90
HELDOUT_PROMPT_TOKENS = 110
CONVERSATION_TOKENS = 330
JSON_BYTES_PER_TOKEN = 7
EXPORT_S = 40.0  # ONNX export + INT8 quantization, measured (d=384 drafter)
INSTALL_S = 1.0
EXPORT_BYTES = 48 << 20  # fp32 graphs + INT8 copies before the fp32 ones are dropped
CHECKPOINT_BYTES = 96 << 20  # checkpoint.pt + best.pt (trainable weights + AdamW moments)


@dataclass(frozen=True)
class ModelShape:
    architecture: str
    name: str
    n_params: int
    vocab_size: int
    hidden_size: int
    file_bytes: int


def inspect_gguf(path: Path) -> ModelShape:
    """The model's shape from its GGUF header; SpeedupError("bad_model") for a file that is
    not a whole GGUF (a cut download: the tensor data must reach the end of every tensor)."""
    size = path.stat().st_size
    try:
        with GGUFIndex(path) as index:
            arch = str(index.meta.get("general.architecture", ""))
            name = str(index.meta.get("general.name", "") or path.stem)
            tensors = list(index.tensors.values())
            vocab, hidden = index.embedding_shape() if EMBED_NAME in index.tensors else (0, 0)
    except (ValueError, struct.error, IndexError, OSError) as exc:
        raise SpeedupError("bad_model", f"{path.name} is not a readable GGUF file: {exc}") from None
    end, n_params = 0, 0
    for t in tensors:
        count = math.prod(t.dims)
        try:
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t.qtype)]
        except (ValueError, KeyError):
            raise SpeedupError(
                "bad_model", f"{path.name}: tensor {t.name} has an unknown type {t.qtype}"
            ) from None
        end = max(end, t.offset + count // block * type_size)
        n_params += count
    if end > size:
        raise SpeedupError(
            "bad_model",
            f"{path.name} is cut short ({format_size(size)} of at least {format_size(end)}): "
            "a truncated download? Download or copy it again.",
        )
    if not vocab:
        raise SpeedupError("bad_model", f"{path.name} has no token embedding ({EMBED_NAME})")
    return ModelShape(arch, name, n_params, vocab, hidden, size)


def check_architecture(shape: ModelShape, path: Path) -> None:
    if shape.architecture not in SUPPORTED_ARCHITECTURES:
        raise SpeedupError(
            "unsupported_architecture",
            f"{path.name} is a '{shape.architecture or 'unknown'}' model; speedup trains drafters "
            f"for {', '.join(SUPPORTED_ARCHITECTURES)} models (the architectures whose GGUF the "
            "training side loads in torch).",
        )


def missing_train_extra() -> list[str]:
    return [m for m in TRAIN_MODULES if importlib.util.find_spec(m) is None]


def check_train_extra() -> None:
    missing = missing_train_extra()
    if missing:
        raise SpeedupError(
            "missing_train_extra",
            f"Training a drafter needs the [train] extra ({', '.join(missing)} not installed): "
            "python3 bootstrap.py install train, or pip install 'hyflash-chat[train]'.",
        )


# ----- what each stage takes ------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """What the corpus folder holds already (a resumed job, or --corpus with earlier data)."""

    answers: int = 0
    conversations: int = 0
    heldout: int = 0


def _generation_s(rates: dict, n: int, prompt: float, answer: float) -> float:
    """Seconds for a generator to write n answers: prompts by prefill, tokens by batched steps
    (step_s: one step of `streams` sequences), plus its load time."""
    if n <= 0:
        return 0.0
    per_answer = prompt / rates["prefill_tok_s"] + answer * rates["step_s"] / rates["streams"]
    return rates.get("load_s", 0.0) + n * per_answer


def _features_s(rates: dict, tokens: float) -> float:
    return rates.get("load_s", 0.0) + tokens / rates["features_tok_s"]


def _volumes(budget: Budget, have: Corpus) -> tuple[int, float, float]:
    """(answers to generate, tokens per answer, tokens to compute features of)."""
    answer = budget.answer_tokens * ANSWER_FILL
    tokens = budget.answers * (PROMPT_TOKENS + answer) + budget.conversations * CONVERSATION_TOKENS
    return max(0, budget.answers - have.answers), answer, tokens


def choose_sources(budget: Budget, have: Corpus, calib: dict) -> dict[str, str]:
    """The generator and the feature source ("llama" or "torch") that finish this budget's
    work soonest on this machine, load times included."""
    sides = [s for s in ("llama", "torch") if s in calib]
    n, answer, tokens = _volumes(budget, have)
    return {
        "generator": min(sides, key=lambda s: _generation_s(calib[s], n, PROMPT_TOKENS, answer)),
        "features": min(sides, key=lambda s: _features_s(calib[s], tokens)),
    }


def stage_seconds(budget: Budget, have: Corpus, calib: dict, choice: dict) -> dict[str, float]:
    """Estimated seconds of each stage from the calibration (calibrate.py) and the sources
    chosen (choose_sources)."""
    n, answer, tokens = _volumes(budget, have)
    heldout = _generation_s(
        calib["llama1"],
        budget.heldout - have.heldout,
        HELDOUT_PROMPT_TOKENS,
        budget.heldout_tokens * ANSWER_FILL,
    )
    heldout_tokens = budget.heldout * (HELDOUT_PROMPT_TOKENS + budget.heldout_tokens * ANSWER_FILL)
    # the walk's features by llama.cpp prefill, the walk itself (about 3 ms a step, a step
    # per ~2 tokens, two drafters), the engine's verify-cost profile
    validate = heldout_tokens / calib["llama"]["features_tok_s"] + heldout_tokens * 0.003 + 15
    train = calib["train"]
    return {
        "plan": 0.0 if calib.get("cached") else calib["seconds"],
        "answers": _generation_s(calib[choice["generator"]], n, PROMPT_TOKENS, answer),
        "heldout": heldout,
        "features": _features_s(calib[choice["features"]], tokens),
        "train": train["setup_s"] + budget.steps * train["step_s"],
        "export": EXPORT_S,
        "validate": validate,
        "install": INSTALL_S,
    }


def stage_disk_bytes(budget: Budget, shape: ModelShape) -> dict[str, int]:
    answer = budget.answer_tokens * ANSWER_FILL
    train_tokens = budget.answers * (PROMPT_TOKENS + answer)
    conv_tokens = budget.conversations * CONVERSATION_TOKENS
    heldout_tokens = budget.heldout * (HELDOUT_PROMPT_TOKENS + budget.heldout_tokens)
    return {
        "plan": 0,
        "answers": int((train_tokens + conv_tokens) * JSON_BYTES_PER_TOKEN),
        "heldout": int(heldout_tokens * JSON_BYTES_PER_TOKEN),
        # float16 features (+ int32 labels of the conversations)
        "features": int((train_tokens + conv_tokens) * shape.hidden_size * 2 + conv_tokens * 4),
        "train": CHECKPOINT_BYTES,
        "export": EXPORT_BYTES,
        "validate": int(heldout_tokens * shape.hidden_size * 2),
        "install": EXPORT_BYTES // 4,
    }


def ram_bytes(shape: ModelShape, torch_dtype_bytes: int = 4) -> int:
    """The most memory one stage takes: llama.cpp maps the file; torch holds the weights
    dequantized (+ activations); training holds the target's embedding and LM head in fp32."""
    llama = shape.file_bytes + (512 << 20)
    torch_side = int(shape.n_params * torch_dtype_bytes * 1.25) + (1 << 30)
    training = 2 * shape.vocab_size * shape.hidden_size * 4 + (1 << 30)
    return max(llama, torch_side, training)


def _existing(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def available_ram() -> int | None:
    try:
        import psutil  # the [train] extra brings it (accelerate)
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_resources(disk_need: int, ram_need: int, where: Path) -> None:
    """SpeedupError("disk" | "ram") when this machine cannot hold the job's remaining stages."""
    free = shutil.disk_usage(_existing(where)).free
    if disk_need > free:
        raise SpeedupError(
            "disk",
            f"Not enough disk space in {where}: the job needs about {format_size(disk_need)}, "
            f"{format_size(free)} is free. Free some space, choose a smaller --budget, or put "
            "the job elsewhere with --out.",
        )
    ram = available_ram()
    if ram is not None and ram_need > ram:
        raise SpeedupError(
            "ram",
            f"Not enough memory: the job needs about {format_size(ram_need)}, "
            f"{format_size(ram)} is available. Close other programs and try again.",
        )


def expected_speedup(histogram: list[int], costs: dict[int, float], drafter_s: float) -> float:
    """Speed over plain decoding at the best fixed number of drafts k per step, from the walk
    at block B (histogram[n]: steps that accepted n drafts), this machine's verify costs T(n)
    (profile_costs) and the drafter's time per step: E(k) = 1 + sum_{j<=k} P(accepted >= j)
    tokens per T(k+1) + drafter time, against 1 token per T(1). 1.0 when no k pays (block
    size auto then decodes plainly)."""
    from engine.decoding.blocksize import CostModel

    cost = CostModel({int(n): float(t) for n, t in costs.items()}, ema=0.0)
    steps = max(sum(histogram), 1)
    at_least = [sum(histogram[n:]) / steps for n in range(len(histogram))]
    best = 1.0
    for k in range(1, len(histogram)):
        tokens = 1.0 + sum(at_least[1 : k + 1])
        best = max(best, tokens * cost(1) / (cost(k + 1) + drafter_s))
    return best


def install_decision(policy: str, tau: float, ngram_tau: float, answers: int) -> tuple[bool, str]:
    """(install?, why): `auto` installs a drafter only if it beats n-gram lookup at block 16 on
    the held-out answers (a drafter that does not would slow the engine down where n-gram is
    the alternative); `always` and `never` say so."""
    beats = tau > ngram_tau
    verdict = (
        f"{'beats' if beats else 'does not beat'} n-gram lookup at block {BLOCK} on {answers} "
        f"held-out answers (tau {tau:.2f} vs {ngram_tau:.2f})"
    )
    if policy == "always":
        return True, f"installed as asked (--install always); {verdict}"
    if policy == "never":
        return False, f"--install never; {verdict}"
    return beats, verdict
