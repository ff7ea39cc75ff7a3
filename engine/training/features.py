"""Training and evaluation data without torch: the self-distilled corpus as token arrays and
the target's features for every position (the final normed state, after the inputs of any
fused layers: LlamaTarget.set_features), computed once by prefill into a float16 memmap cache
(resumable). Used by training and by the acceptance benchmark.

The feature source is llama.cpp's prefill ("llama", feature_cache's default; `hyflash train`
resolves "auto", see resolve_source) or, with the [train] extra, the same GGUF in torch
("torch-fp32" / "torch-bf16", engine/training/torch_target.py): same cache format, in a folder
of its own so the two never mix."""

from __future__ import annotations

import hashlib
import json
import time
from itertools import islice
from pathlib import Path

import numpy as np

from engine.atomic_files import write_json


def load_corpus(path: Path, max_len: int) -> tuple[list[np.ndarray], list[int], list[str]]:
    from engine.training.distill import load_answers

    tokens, prompt_lens, keys = [], [], []
    for row in load_answers(path):
        seq = np.asarray(row["prompt_ids"] + row["answer_ids"], dtype=np.int64)[:max_len]
        if len(row["answer_ids"]) < 2 or len(row["prompt_ids"]) >= len(seq) - 1:
            continue
        tokens.append(seq)
        prompt_lens.append(len(row["prompt_ids"]))
        keys.append(row["key"])
    return tokens, prompt_lens, keys


# the feature source `hyflash data torch-check` measured fastest on this machine
SOURCE_VERDICT = Path("runs/features/source.json")


def source_machine(device: str = "auto") -> str:
    """What a measured verdict holds for: the CPU model (the name alone does not tell an AMX
    Xeon from one without), the torch device and whether bf16 is native there."""
    from engine.bench.speed import machine_info
    from engine.training.torch_target import native_bf16, resolve_device

    return f"{machine_info(0)['cpu']}; {resolve_device(device)}; bf16 native {native_bf16(device)}"


def measured_source(device: str = "auto") -> str | None:
    """The source torch-check found fastest here (among those that agree with llama.cpp),
    or None when it has not run on this machine."""
    try:
        verdict = json.loads(SOURCE_VERDICT.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return verdict.get("source") if verdict.get("machine") == source_machine(device) else None


def resolve_source(source: str, dtype: str = "auto", device: str = "auto") -> str:
    """A feature source by name: "llama", or "torch" with its dtype resolved ("torch-fp32" or
    "torch-bf16"; auto picks bf16 where it runs natively), or "auto": what torch-check
    measured fastest on this machine, else torch where the [train] extra is installed (2.3x
    llama.cpp's prefill in fp32, 8.8x in bf16 on the CPUs measured so far), else llama."""
    if source == "auto":
        from importlib.util import find_spec

        if find_spec("transformers") is None or find_spec("torch") is None:
            return "llama"
        source = measured_source(device) or "torch"
        if source != "torch":
            return source
    if source == "llama":
        return source
    if source != "torch":
        raise ValueError(f"unknown feature source {source!r} (auto, llama or torch)")
    from engine.training.torch_target import resolve_dtype

    return f"torch-{resolve_dtype(dtype, device)}"


def layers_tag(layers: tuple[int, ...]) -> str:
    """How a set of fused layers names its cache folder: L2-15-27."""
    return "L" + "-".join(str(x) for x in layers)


def cache_dir_for(
    gguf_path: Path,
    keys: list[str],
    with_labels: bool = False,
    source: str = "llama",
    layers: tuple[int, ...] = (),
) -> Path:
    """The default cache folder of a corpus: named by the target and the answers' keys, so
    training and benchmarks on the same answers share one prefill; torch caches live in
    runs/features/<source>/, fused-layer caches in a folder named by their layers."""
    digest = hashlib.sha1("|".join(keys).encode()).hexdigest()[:12]
    root = Path("runs/features") if source == "llama" else Path("runs/features") / source
    if layers:
        root = root / layers_tag(layers)
    return root / f"{gguf_path.stem}-{digest}{'-labels' if with_labels else ''}"


def _write_index(path: Path, index: dict) -> None:
    # atomic: other processes (parallel trainings) may be reading it
    write_json(path, index, indent=None)


def sequence_digest(seq: np.ndarray) -> str:
    return hashlib.sha1(np.asarray(seq, dtype=np.int64).tobytes()).hexdigest()[:16]


def _reusable(
    gguf_path: Path, cache_dir: Path, with_labels: bool, source: str, layers: tuple[int, ...]
) -> dict[str, tuple]:
    """digest -> (features memmap, labels memmap or None, offset, length) over the finished
    sequences of the other caches of the same target and source: the features of a sequence
    depend on its tokens alone, so a grown corpus only prefills its new sequences."""
    found: dict[str, tuple] = {}
    for other in sorted(cache_dir.parent.glob(f"{gguf_path.stem}-*")):
        index_path = other / "index.json"
        if other == cache_dir or not index_path.exists():
            continue
        index = json.loads(index_path.read_text())
        digests = index.get("digests", [])[: index.get("done", 0)]
        if not digests or not index.get("fingerprint", "").startswith(gguf_path.name + ":"):
            continue
        if index.get("source", "llama") != source or tuple(index.get("layers", ())) != layers:
            continue
        has_labels = (other / "labels.i32").exists()
        if with_labels and not has_labels:
            continue
        lengths = index["lengths"]
        total = int(sum(lengths))
        feats = np.memmap(
            other / "features.f16", dtype=np.float16, mode="r", shape=(total, index["n_embd"])
        )
        labels = (
            np.memmap(other / "labels.i32", dtype=np.int32, mode="r", shape=(total,))
            if has_labels
            else None
        )
        offset = 0
        for digest, length in zip(digests, lengths, strict=False):
            found.setdefault(digest, (feats, labels, offset, length))
            offset += length
    return found


def llama_rows(target, seq: list[int], with_labels: bool) -> tuple[np.ndarray, list | None]:
    """Features of seq (and with_labels its next-token predictions) by llama.cpp prefill; a
    copy, since the target's own feature store is overwritten by the next sequence."""
    target.reset()
    if not with_labels:
        target.prefill(seq)
        return target.features(0, len(seq)).copy(), None
    preds = []
    for c in range(0, len(seq), target.n_batch):
        out = target.decode(seq[c : c + target.n_batch], all_logits=True)
        preds.extend(np.argmax(out.logits, axis=1).tolist())
    return target.features(0, len(seq)).copy(), preds


def _torch_rows(
    target, tokens: list[np.ndarray], batch: list[int], with_labels: bool, layers: list[int]
) -> dict:
    """index -> (features, next-token predictions or None) of a batch, by one torch forward;
    features as LlamaTarget's: the fused layers' inputs in order, then the final state."""
    outs = target.forward([tokens[j] for j in batch], next_tokens=with_labels)
    return {
        j: (
            np.concatenate([*(o.layers[x] for x in layers), o.features], axis=1),
            o.next_tokens,
        )
        for j, o in zip(batch, outs, strict=True)
    }


def _cache_index(
    tokens: list[np.ndarray],
    gguf_path: Path,
    index_path: Path,
    with_labels: bool,
    source: str,
    layers: tuple[int, ...],
) -> tuple[dict, bool]:
    """(index, whether it had digests before): the cache's index.json when it holds these
    sequences, else a fresh one (done = 0)."""
    total = sum(len(t) for t in tokens)
    fingerprint = f"{gguf_path.name}:{len(tokens)}:{total}" + (":labels" if with_labels else "")
    if source != "llama":  # llama caches keep their old fingerprint (still valid)
        fingerprint += f":{source}"
    if layers:
        fingerprint += ":L" + ",".join(str(x) for x in layers)
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    digests = [sequence_digest(t) for t in tokens]
    # same keys and lengths but other tokens (answers regenerated under the same keys) would
    # otherwise pass the fingerprint and serve the old sequences' features
    if index.get("fingerprint") != fingerprint or index.get("digests", digests) != digests:
        index = {"fingerprint": fingerprint, "done": 0}
    had_digests = "digests" in index
    index["digests"] = digests
    index["lengths"] = [len(t) for t in tokens]
    index["source"] = source
    index["layers"] = list(layers)
    return index, had_digests


def _open_source(
    missing: list[int],
    gguf_path: Path,
    source: str,
    threads: int | None,
    device: str,
    layers: tuple[int, ...],
):
    """The target that computes the missing sequences' features (None when there are none)."""
    if not missing:
        return None
    if source == "llama":
        from engine.llama.target import LlamaTarget

        target = LlamaTarget(gguf_path, n_ctx=max(missing) + 8, features=True, n_threads=threads)
        target.set_features(True, layers)
        return target
    from engine.training.torch_target import TorchTarget

    dtype = source.removeprefix("torch-")
    return TorchTarget(
        gguf_path, dtype=dtype, device=device, threads=threads, capture_layers=layers
    )


def _fill(
    tokens: list[np.ndarray],
    offsets: np.ndarray,
    index: dict,
    index_path: Path,
    stores: tuple[np.memmap, np.memmap | None],
    sources: tuple[object, dict[str, tuple]],
    *,
    progress,
    save_every_s: float,
    batch_tokens: int,
) -> None:
    """Compute (or copy from another cache) the sequences from index["done"] on, saving the
    stores and the index every 50 sequences or every save_every_s seconds."""
    store, labels = stores
    target, reuse = sources
    with_labels = labels is not None
    pending: dict[int, tuple] = {}  # torch: rows of a batch computed ahead of the loop
    saved_at = time.monotonic()
    for i in range(index["done"], len(tokens)):
        seq = tokens[i].tolist()
        lo, hi = offsets[i], offsets[i + 1]
        known = reuse.get(index["digests"][i])
        if known is not None:
            src_feats, src_labels, at, length = known
            store[lo:hi] = src_feats[at : at + length]
            if labels is not None:
                labels[lo:hi] = src_labels[at : at + length]
        else:
            if index["source"] == "llama":
                feats, preds = llama_rows(target, seq, with_labels)
            else:
                if i not in pending:
                    for batch in _window_batches(i, tokens, index["digests"], reuse, batch_tokens):
                        pending.update(
                            _torch_rows(target, tokens, batch, with_labels, index["layers"])
                        )
                feats, preds = pending.pop(i)
            store[lo:hi] = feats
            if labels is not None:
                labels[lo:hi] = [seq[0], *preds[: len(seq) - 1]]
        # every 50 sequences, or every minute: one long-context sequence takes about that
        if i % 50 == 49 or i == len(tokens) - 1 or time.monotonic() - saved_at >= save_every_s:
            saved_at = time.monotonic()
            store.flush()
            if labels is not None:
                labels.flush()
            index["done"] = i + 1
            _write_index(index_path, index)
        if progress:
            progress(i + 1, len(tokens))


def feature_cache(
    tokens: list[np.ndarray],
    gguf_path: Path,
    cache_dir: Path,
    *,
    threads: int | None = None,
    progress=None,
    with_labels: bool = False,
    save_every_s: float = 60.0,
    source: str = "llama",
    device: str = "auto",
    batch_tokens: int = 4096,
    layers: tuple[int, ...] = (),
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Target features for every sequence (see layers), computed once by prefill into a float16
    memmap (cache_dir/features.f16 + index.json); an interrupted run continues where it was,
    and sequences another cache of the same target already holds are copied, not prefilled.

    with_labels: also the target's greedy prediction for every position (labels[j] = argmax
    of the logits after tokens[:j]; labels[0] = tokens[0]), from the same prefill with logits
    on every row, into labels.i32: training targets for text the target did not write.

    source: "llama" (llama.cpp prefill) or "torch-fp32" / "torch-bf16" (resolve_source; the
    GGUF in torch on `device`, sequences batched by length up to batch_tokens padded).

    layers: fused features: these target layers' inputs come before the final state in each
    row ((len(layers) + 1) * n_embd wide), as the run-time target gives them."""
    layers = tuple(layers)
    cache_dir.mkdir(parents=True, exist_ok=True)
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])])
    total = int(offsets[-1])
    index_path = cache_dir / "index.json"
    index, had_digests = _cache_index(tokens, gguf_path, index_path, with_labels, source, layers)
    mode = "r+" if (cache_dir / "features.f16").exists() and index["done"] else "w+"
    target = None
    reuse: dict[str, tuple] = {}
    if index["done"] < len(tokens):
        reuse = _reusable(gguf_path, cache_dir, with_labels, source, layers)
        todo = range(index["done"], len(tokens))
        missing = [index["lengths"][i] for i in todo if index["digests"][i] not in reuse]
        target = _open_source(missing, gguf_path, source, threads, device, layers)
        # the row width (the key's name predates fused layers)
        index["n_embd"] = (
            (len(layers) + 1) * target.n_embd
            if target is not None
            else next(iter(reuse.values()))[0].shape[1]
        )
    store = np.memmap(
        cache_dir / "features.f16", dtype=np.float16, mode=mode, shape=(total, int(index["n_embd"]))
    )
    labels = (
        np.memmap(cache_dir / "labels.i32", dtype=np.int32, mode=mode, shape=(total,))
        if with_labels
        else None
    )
    try:
        _fill(
            tokens,
            offsets,
            index,
            index_path,
            (store, labels),
            (target, reuse),
            progress=progress,
            save_every_s=save_every_s,
            batch_tokens=batch_tokens,
        )
    finally:
        if target is not None:
            target.close()
    if index["done"] == len(tokens) and not had_digests:  # caches made before digests
        _write_index(index_path, index)
    feats = [store[offsets[i] : offsets[i + 1]] for i in range(len(tokens))]
    if labels is None:
        return feats, None
    return feats, [
        np.asarray(labels[offsets[i] : offsets[i + 1]], dtype=np.int64) for i in range(len(tokens))
    ]


# sequences sorted by length together: a batch padded to its longest wastes 5-6% at 128 on
# the distilled corpus (lengths 36-896), 33% when consecutive sequences were batched as they came
_SORT_WINDOW = 128


def _window_batches(
    start: int,
    tokens: list[np.ndarray],
    digests: list[str],
    reuse: dict,
    batch_tokens: int,
    window: int = _SORT_WINDOW,
) -> list[list[int]]:
    """The next `window` sequences from start still to compute (none another cache holds),
    sorted by length and cut into batches of at most batch_tokens once padded (one sequence
    at least): a padded batch costs its count times its longest sequence. Computing a window
    ahead of the loop costs at most one window's work if the run is killed."""
    todo = list(islice((j for j in range(start, len(tokens)) if digests[j] not in reuse), window))
    batches: list[list[int]] = []
    batch: list[int] = []
    for j in sorted(todo, key=lambda j: len(tokens[j])):
        if batch and len(tokens[j]) * (len(batch) + 1) > batch_tokens:
            batches.append(batch)
            batch = []
        batch.append(j)
    return [*batches, batch] if batch else batches
