"""`hyflash data ...`, `hyflash train` and `hyflash export` (with torch installed): their
argument parsers; what they run lives in the training room (engine.training.data_run,
torch_check, vocab_coverage, train_run), where the speed-up job runs it too."""

from __future__ import annotations

from engine.bench.corpora import TRAIN_SOURCES
from engine.drafters.hyflash_card import ATTENTION_KINDS, HISTORY_KINDS, MEMORY_KINDS, DrafterConfig
from engine.paths import DISTILL_ROOT, EVAL_CORPUS
from engine.training.data_run import cmd_data_conversations, cmd_data_generate
from engine.training.torch_check import cmd_data_torch_check
from engine.training.train_config import TrainConfig
from engine.training.train_run import cmd_export, cmd_train
from engine.training.vocab_coverage import SIZES, cmd_data_vocab_coverage


def add_parser(sub) -> None:
    """`hyflash data`, `train` and `export`."""
    _add_data_parser(sub)
    _add_train_parsers(sub)


def _add_torch_args(parser) -> None:
    parser.add_argument(
        "--torch-dtype",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="torch target weights (auto: bf16 where native: AMX/AVX512-BF16 or CUDA)",
    )
    parser.add_argument("--torch-device", default="auto", choices=["auto", "cpu", "cuda"])


def _add_data_parser(sub) -> None:
    data = sub.add_parser("data", help="self-distillation corpora")
    dsub = data.add_subparsers(dest="data_command", required=True)
    _add_data_generate_parser(dsub)
    conv = dsub.add_parser(
        "conversations", help="ShareGPT turns with their own answers (prefill-labelled data)"
    )
    conv.add_argument("--model", default=None)
    conv.add_argument(
        "--out", default=None, help=f"default {DISTILL_ROOT}/<model id>/sharegpt_answers.jsonl"
    )
    conv.add_argument("--limit", type=int, default=1000)
    conv.add_argument("--max-tokens", type=int, default=384)
    conv.set_defaults(func=cmd_data_conversations)
    _add_torch_check_parser(dsub)
    cover = dsub.add_parser(
        "vocab-coverage",
        help="share of held-out answer tokens a draft vocabulary of each size covers, chosen "
        "as training chooses it",
    )
    cover.add_argument("--model", default=None)
    cover.add_argument("--answers", default=None, help="training answers (default: the model's)")
    cover.add_argument("--max-answers", type=int, default=None, help="its first N (default all)")
    cover.add_argument("--heldout", default=None, help="held-out answers (default: the model's)")
    cover.add_argument("--sizes", default=SIZES, help="draft vocabulary sizes")
    cover.add_argument("--out", default=None, help="folder for vocab_coverage.json and .md")
    cover.set_defaults(func=cmd_data_vocab_coverage)


def _add_data_generate_parser(dsub) -> None:
    gen = dsub.add_parser("generate", help="the target answers training prompts (resumable)")
    gen.add_argument("--model", default=None)
    gen.add_argument(
        "--split",
        default="train",
        choices=["train", "eval", "long", "long-train"],
        help="training prompts, held-out evaluation prompts, long-context prompts of "
        "--bucket (the last two for benchmarks), or long-context training prompts of --bucket "
        "(HotpotQA questions the benchmark does not use; --per-set of them)",
    )
    gen.add_argument("--bucket", default="2048-4096", help="long, long-train: prompt tokens lo-hi")
    gen.add_argument(
        "--out",
        default=None,
        help=f"default {DISTILL_ROOT}/<model id>/answers.jsonl, eval_answers.jsonl or "
        "<split>_<bucket>.jsonl",
    )
    gen.add_argument("--limit", type=int, default=None, help="first N prompts")
    gen.add_argument(
        "--sources",
        default=None,
        help=f"train: only prompts of these sources, comma-separated ({','.join(TRAIN_SOURCES)}"
        "), in the same fixed order; e.g. gsm8k,mbpp answers the in-domain maths and code "
        "prompts first",
    )
    gen.add_argument(
        "--per-set",
        type=int,
        default=12,
        help="eval, long: first N of every set; long-train: N prompts",
    )
    gen.add_argument(
        "--streams", type=int, default=8, help="parallel llama.cpp sequences, or torch batch size"
    )
    gen.add_argument("--max-tokens", type=int, default=384)
    gen.add_argument("--threads", type=int, default=None)
    gen.add_argument(
        "--generator",
        default="llama",
        choices=["llama", "torch"],
        help="who answers: llama.cpp (the run-time target) or the same GGUF in torch "
        "(the [train] extra; batched, for a GPU; rows record their generator)",
    )
    _add_torch_args(gen)
    gen.set_defaults(func=cmd_data_generate)


def _add_torch_check_parser(dsub) -> None:
    check = dsub.add_parser(
        "torch-check",
        help="the GGUF in torch vs llama.cpp on held-out text: speed of features, labels "
        "and batched generation; feature cosine and argmax agreement ([train] extra)",
    )
    check.add_argument("--model", default=None)
    check.add_argument("--answers", default=str(EVAL_CORPUS), help="held-out answers")
    check.add_argument(
        "--dtype",
        default="all",
        choices=["all", "auto", "fp32", "bf16"],
        help="torch dtypes to measure (all: fp32, and bf16 where it runs natively)",
    )
    check.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    check.add_argument("--tokens", type=int, default=8192, help="held-out tokens")
    check.add_argument("--batch", type=int, default=8, help="torch sequences per forward")
    check.add_argument("--gen-prompts", type=int, default=8, help="prompts, generated at once")
    check.add_argument("--gen-tokens", type=int, default=128, help="new tokens per prompt")
    check.add_argument("--threads", type=int, default=None)
    check.add_argument("--out", default=None, help="folder for torch_check.json and .md")
    check.set_defaults(func=cmd_data_torch_check)


def _add_train_parsers(sub) -> None:
    tr = sub.add_parser("train", help="train a HyFlash drafter (torch; resumable)")
    tr.add_argument(
        "--corpus", default=None, help=f"default {DISTILL_ROOT}/<model id>/answers.jsonl"
    )
    tr.add_argument("--out", required=True, help="run folder (checkpoint, config, history)")
    tr.add_argument("--model", default=None)
    tr.add_argument("--cache", default=None, help="feature cache folder")
    tr.add_argument("--config", default=None, help="DrafterConfig JSON (overrides the knobs)")
    _add_drafter_shape_args(tr)
    _add_training_data_args(tr)
    _add_training_run_args(tr)
    tr.set_defaults(func=cmd_train)
    _add_export_parser(sub)


def _add_drafter_shape_args(tr) -> None:
    """The DrafterConfig knobs (--config overrides them)."""
    tr.add_argument("--d-model", type=int, default=DrafterConfig.d_model)
    tr.add_argument("--layers", type=int, default=DrafterConfig.n_layers)
    tr.add_argument("--heads", type=int, default=DrafterConfig.n_heads)
    tr.add_argument("--window", type=int, default=DrafterConfig.window)
    tr.add_argument("--block-size", type=int, default=DrafterConfig.block_size)
    tr.add_argument("--attention", default=DrafterConfig.attention, choices=ATTENTION_KINDS)
    tr.add_argument("--memory", default=DrafterConfig.memory, choices=MEMORY_KINDS)
    tr.add_argument("--history", default=DrafterConfig.history, choices=HISTORY_KINDS)
    tr.add_argument("--no-cross-slot", action="store_true")
    tr.add_argument(
        "--causal-slots",
        action="store_true",
        help="slots see earlier slots only: a block of B runs B rows at run time, not 16",
    )
    tr.add_argument("--no-copy", action="store_true")
    tr.add_argument("--draft-vocab", type=int, default=DrafterConfig.draft_vocab_size)
    tr.add_argument(
        "--feature-layers",
        default="",
        help="target layers whose inputs are fused with the final state as the drafter's "
        "features, e.g. 2,15,27 (low, middle, high); empty: the final state only",
    )


def _add_training_data_args(tr) -> None:
    """The optimiser's schedule and which sequences it trains on."""
    tr.add_argument("--steps", type=int, default=TrainConfig.steps)
    tr.add_argument("--batch", type=int, default=TrainConfig.batch_seqs)
    tr.add_argument("--anchors", type=int, default=TrainConfig.anchors_per_seq)
    tr.add_argument("--lr", type=float, default=TrainConfig.lr)
    tr.add_argument("--warmup", type=int, default=TrainConfig.warmup)
    tr.add_argument("--seed", type=int, default=TrainConfig.seed)
    tr.add_argument("--eval-every", type=int, default=TrainConfig.eval_every)
    tr.add_argument(
        "--keep-steps",
        default="",
        help="also keep the weights of these steps as step-N.pt, e.g. 1000,2000,4000 (points "
        "of a learning curve along one run; `hyflash export --checkpoint step-N.pt`)",
    )
    tr.add_argument("--val-frac", type=float, default=0.05)
    tr.add_argument("--max-len", type=int, default=1024)
    tr.add_argument("--max-answers", type=int, default=None, help="first N sequences only")
    tr.add_argument(
        "--sources",
        default=None,
        help=f"--corpus answers to prompts of these sources only, comma-separated "
        f"({','.join(TRAIN_SOURCES)}); --max-answers counts among them",
    )
    tr.add_argument(
        "--source-weight",
        default=None,
        help="draw sequences of these prompt sources more or less often than the others, "
        "e.g. gsm8k=3,mbpp=3 (sources weigh 1 unless named; the validation split is not "
        "weighted)",
    )
    tr.add_argument(
        "--extra-corpus",
        default=None,
        help="a second corpus of text the target did not write (hyflash data "
        "conversations), trained on the target's labels",
    )
    tr.add_argument(
        "--supervision",
        default=TrainConfig.supervision,
        choices=["all", "own"],
        help="in --extra-corpus text: every slot learns the target's label (all), or slot k "
        "only where the k-1 tokens after the anchor are what the target itself predicts (own)",
    )
    tr.add_argument(
        "--labels",
        default="tokens",
        choices=["tokens", "target"],
        help="train on the stored tokens (self-distilled answers) or on the "
        "target's own prediction at every position (text it did not write)",
    )


def _add_training_run_args(tr) -> None:
    """Threads, precision, the copy-trust loss and the feature source."""
    tr.add_argument("--threads", type=int, default=TrainConfig.threads, help="torch threads")
    tr.add_argument(
        "--copy-trust",
        type=float,
        default=TrainConfig.copy_trust,
        help="weight of the copy-path trust loss: the gate learns to take the n-gram lookup "
        "candidate where it is right (0: NLL only)",
    )
    tr.add_argument(
        "--soft-weight",
        type=float,
        default=TrainConfig.soft_weight,
        help="soft targets: minimise (1 - w) x NLL of the labels + w x KL from the target's "
        "own distribution (its cached final state through its head) over the draft "
        "vocabulary; 0: hard labels only",
    )
    tr.add_argument(
        "--precision",
        default=TrainConfig.precision,
        choices=["fp32", "bf16", "auto"],
        help="the training forward's matmuls: fp32, or bf16 under autocast (about 1.5x faster "
        "steps on AMX CPUs; weights and the exported drafter stay fp32); auto: bf16 where the "
        "CPU runs it natively (AMX or AVX512-BF16), else fp32",
    )
    tr.add_argument(
        "--llama-threads", type=int, default=None, help="threads for prefill (either source)"
    )
    tr.add_argument(
        "--feature-source",
        default="auto",
        choices=["auto", "llama", "torch"],
        help="who computes features (and --labels target): llama.cpp prefill, or the same "
        "GGUF in torch; auto: the faster one `hyflash data torch-check` measured here, else "
        "torch",
    )
    _add_torch_args(tr)
    tr.add_argument("--quiet", action="store_true")


def _add_export_parser(sub) -> None:
    ex = sub.add_parser("export", help="export a trained run to an ONNX drafter folder")
    ex.add_argument("--run", required=True)
    ex.add_argument("--out", required=True)
    ex.add_argument("--model", default=None)
    ex.add_argument("--name", default="hyflash")
    ex.add_argument(
        "--checkpoint",
        default="checkpoint.pt",
        help="checkpoint.pt (last) or best.pt (best validation)",
    )
    ex.add_argument("--quantize", nargs="*", default=["int8"], choices=["int8", "int4"])
    ex.add_argument(
        "--keep-only",
        default=None,
        choices=["fp32", "int8", "int4"],
        help="ship one weight variant (a smaller folder)",
    )
    ex.add_argument("--default-weights", default=None, choices=["fp32", "int8", "int4"])
    ex.set_defaults(func=cmd_export)
