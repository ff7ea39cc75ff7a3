"""HyFlash run-time drafter: the exported ONNX graphs driven by onnxruntime + numpy (no torch).

State between calls; the first two are constant in context length for "local" attention and
are what memory_bytes() reports:
  - the window: per-layer K/V (RoPE applied at absolute positions), pointer keys and the
    token that followed each entry (what the pointer copies), for the last W committed
    tokens (the full-attention baseline keeps all of them);
  - the recurrent memory state (heads, Dk, Dv), folded forward by the observe graph;
  - besides, an n-gram index over committed token ids for the copy path's lookup candidates
    (tens of bytes per token, like the n-gram drafter's; see memory_breakdown()).
observe() costs O(new tokens) (one observe-graph call per chunk of new tokens); propose()
is one propose-graph call plus a scatter of draft-vocabulary and copy log-probs into the
target vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from engine.decoding.drafter_protocol import Draft
from engine.drafters.hyflash_card import (
    CARD,
    CARD_FORMAT,
    CARD_VERSION,
    DRAFT_VOCAB,
    OBSERVE_ONNX,
    PROPOSE_ONNX,
    DrafterConfig,
    draft_memory_bytes,
)
from engine.drafters.ngram_index import NgramIndex
from engine.events import DrafterMismatchError
from engine.file_hash import file_sha256
from engine.llama.backends import CPU_EP, create_session
from engine.llama.gguf_file import EmbeddingRows

# ----- confidence buckets for the block-size chooser ------------------------------------

SURE_LOGPROB = float(np.log(0.8))
SURE_BUCKETS = (0, 1, 2, 3, 5, 8, 12)  # lower edges of the "leading sure slots" ranges


def confidence_bucket(logprobs: np.ndarray, tokens: np.ndarray) -> str:
    """Label a draft by how many leading slots the drafter is sure of (p >= 0.8), in ranges:
    the block-size chooser learns acceptance per label, so confident drafts get long blocks
    and unsure ones short or none, instead of one average over all drafts."""
    top = logprobs[np.arange(len(tokens)), tokens] >= SURE_LOGPROB
    sure = int(np.argmin(np.append(top, False)))
    edge = max(e for e in SURE_BUCKETS if e <= sure)
    return f"hyflash-sure{edge}"


# ----- target identity check ---------------------------------------------------------------


def check_card(card: dict, target) -> None:
    """Refuse a drafter trained for another target: vocab and hidden size, then the GGUF hash."""
    ident = card.get("target") or {}
    name = card.get("name", "this drafter")
    want_vocab, want_hidden = ident.get("vocab_size"), ident.get("hidden_size")
    have_vocab, have_hidden = int(target.n_vocab), int(target.n_embd)
    model = Path(str(getattr(target, "path", "the target"))).name
    if want_vocab != have_vocab or want_hidden != have_hidden:
        raise DrafterMismatchError(
            f"The HyFlash drafter '{name}' was trained for a target with vocabulary "
            f"{want_vocab} and hidden size {want_hidden}, but {model} has vocabulary "
            f"{have_vocab} and hidden size {have_hidden}. Use a drafter trained for this model, "
            "or the n-gram drafter."
        )
    layers = (card.get("config") or {}).get("feature_layers") or []
    n_layer = getattr(target, "n_layer", None)
    if n_layer is not None and any(int(x) >= n_layer for x in layers):
        raise DrafterMismatchError(
            f"The HyFlash drafter '{name}' reads target layers {list(layers)}, but {model} has "
            f"{n_layer} layers. Use a drafter trained for this model, or the n-gram drafter."
        )
    can_capture = getattr(target, "can_capture_layers", None)
    if layers and can_capture is not None and not can_capture(layers):
        arch = getattr(target, "architecture", "this")
        raise DrafterMismatchError(
            f"The HyFlash drafter '{name}' reads target layers {list(layers)}, but this "
            f"llama.cpp build cannot read the layer inputs of a {arch} model ({model}). Use a "
            "drafter trained on the final layer only, or the n-gram drafter."
        )
    want_sha = ident.get("gguf_sha256")
    path = getattr(target, "path", None)
    if want_sha and path is not None:
        have_sha = file_sha256(path)
        if have_sha != want_sha:
            raise DrafterMismatchError(
                f"The HyFlash drafter '{name}' was trained for another build of this model "
                f"(GGUF sha256 {want_sha[:12]}..., but {model} is {have_sha[:12]}...): its "
                "features and weights would not match. Use a drafter trained for this file, "
                "or the n-gram drafter."
            )


# ----- the drafter --------------------------------------------------------------------------


# onnxruntime intra-op threads of the drafter's graphs: its ~200 nodes are tiny, so a second
# thread's wake-up costs more than it shares (scripts/drafter_threads.py, 2-core Xeon: propose
# of 3 drafts 1.2-1.3 vs 1.4-1.5 ms, of 15 equal, observe of a token 0.2-0.3 vs 0.3-0.4 ms)
DRAFTER_THREADS = 1


def session_options(threads: int = DRAFTER_THREADS, spin: bool = False) -> ort.SessionOptions:
    """spin=False: ORT worker threads sleep as soon as a call ends instead of busy-waiting for
    the next one, which would steal the cores llama.cpp needs for the verify that follows."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return opts


class HyFlashDrafter:
    name = "hyflash"
    wants_features = True

    def __init__(
        self,
        folder: str | Path,
        embed: EmbeddingRows,
        *,
        card: dict | None = None,
        weights: str = "fp32",
        threads: int = DRAFTER_THREADS,
        providers: Sequence[str] | None = None,
        spin: bool = False,
    ) -> None:
        folder = Path(folder)
        self.folder = folder
        self.card = card if card is not None else json.loads((folder / CARD).read_text("utf-8"))
        self.cfg = DrafterConfig.from_dict(self.card["config"])
        self.feature_layers = self.cfg.feature_layers
        self.files = self.card.get("files", {})
        self.weights = weights
        # through the backend choice's provider list, with its verified fallback (a provider
        # counts only if the session really took it) and plugin EPs such as onnxruntime-qnn
        providers = list(providers or [CPU_EP])
        opened = [
            create_session(
                folder / self._file(graph, weights),
                providers,
                session_options=session_options(threads, spin),
            )
            for graph in ("propose", "observe")
        ]
        self._propose, self._observe = (r.session for r in opened)
        self.provider = opened[0].provider  # where the drafter runs
        self.provider_fallbacks = [line for r in opened for line in r.fallback_log]
        self._propose_inputs = {i.name for i in self._propose.get_inputs()}
        self._propose_outputs = [o.name for o in self._propose.get_outputs()]
        self._observe_outputs = [o.name for o in self._observe.get_outputs()]
        self.draft_ids = np.load(folder / DRAFT_VOCAB).astype(np.int64)
        ids = self.draft_ids
        if ids.ndim != 1 or not ids.size or ids.min() < 0 or ids.max() >= embed.vocab_size:
            raise DrafterMismatchError(
                f"{folder / DRAFT_VOCAB} names token ids outside the target's vocabulary "
                f"(0..{embed.vocab_size - 1}): the drafter is damaged or not for this model"
            )
        self._sorted_order = np.argsort(self.draft_ids)
        self._sorted_draft_ids = self.draft_ids[self._sorted_order]
        self.embed = embed
        if embed.hidden_size != self.cfg.hidden_size:
            raise DrafterMismatchError("the target's embedding width does not match the drafter")
        cfg = self.cfg
        self._n_slots = cfg.n_slots
        # graphs that run only the rows a propose scores (HyFlashModel causal slots)
        self.pays_per_draft = bool(self.card.get("short_blocks", False))
        self._hist_len = cfg.history_len if cfg.memory != "none" else None
        # GDN's exported chunk is exact up to observe_chunk tokens; the other graphs take any
        # length, so long prompts go through in few calls
        self._chunk = cfg.observe_chunk if cfg.memory == "gdn" else max(cfg.observe_chunk, 256)
        self.reset()

    def _file(self, graph: str, weights: str) -> str:
        name = self.files.get(graph, {}).get(weights)
        if name is None:
            if weights == "fp32":
                return PROPOSE_ONNX if graph == "propose" else OBSERVE_ONNX
            have = sorted(self.files.get(graph, {}))
            raise DrafterMismatchError(
                f"This HyFlash drafter has no {weights} weights (available: {', '.join(have)})"
            )
        return name

    @classmethod
    def load(
        cls,
        path: str | Path,
        target,
        *,
        weights: str | None = None,
        threads: int = DRAFTER_THREADS,
        providers: Sequence[str] | None = None,
        spin: bool = False,
    ) -> HyFlashDrafter:
        """Open a drafter folder for `target` (anything with path, n_vocab, n_embd: normally a
        LlamaTarget); refuses with DrafterMismatchError when it was trained for another one.
        weights: "fp32" | "int8" | "int4"; None takes the card's recommended one (or fp32)."""
        folder = Path(path)
        card_path = folder / CARD
        if not card_path.exists():
            raise DrafterMismatchError(f"{folder} is not a HyFlash drafter folder (no {CARD})")
        try:
            card = json.loads(card_path.read_text(encoding="utf-8"))
            DrafterConfig.from_dict(card["config"])  # checks its own values
            if not isinstance(card.get("target", {}), dict):
                raise ValueError("its target is not an object")
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise DrafterMismatchError(f"{card_path} is damaged ({exc})") from None
        if card.get("format") != CARD_FORMAT or int(card.get("format_version", 0)) > CARD_VERSION:
            raise DrafterMismatchError(
                f"{folder} holds a drafter of format {card.get('format')!r} version "
                f"{card.get('format_version')}; this app reads {CARD_FORMAT} up to version "
                f"{CARD_VERSION}. Update the app or use another drafter."
            )
        check_card(card, target)
        if weights is None:
            weights = card.get("default_weights", "fp32")
        embed = EmbeddingRows(target.path)
        return cls(
            folder,
            embed,
            card=card,
            weights=weights,
            threads=threads,
            providers=providers,
            spin=spin,
        )

    # ----- protocol -----------------------------------------------------------------------

    def reset(self) -> None:
        cfg = self.cfg
        self._cap = cap = cfg.window if cfg.attention == "local" else 256
        self._n = 0  # committed tokens observed (= position of the next anchor)
        self._kv = np.zeros((cfg.n_layers, 2, cap, cfg.d_model), dtype=np.float32)
        self._ptr = np.zeros((cap, cfg.ptr_dim), dtype=np.float32)
        self._next = np.zeros(cap, dtype=np.int64)  # token that followed each entry
        self._len = 0  # entries held (chronological, oldest first)
        if cfg.memory != "none":
            shape = (1, cfg.mem_heads, cfg.mem_key_dim, cfg.mem_value_dim)
            self._state = np.zeros(shape, dtype=np.float32)
        else:
            self._state = None
        hist = self._hist_len or 0
        self._hist_feat = np.zeros((hist, cfg.feature_dim), dtype=np.float32)
        self._hist_emb = np.zeros((hist, cfg.hidden_size), dtype=np.float32)
        self._hist_n = 0
        self._state_dirty = False
        self.ngram = NgramIndex(cfg.max_ngram)

    def observe(self, tokens: Sequence[int], features: np.ndarray | None) -> None:
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        if features is None:
            raise ValueError("the HyFlash drafter needs the target's features (wants_features)")
        feats = np.ascontiguousarray(features, dtype=np.float32).reshape(len(tokens), -1)
        if feats.shape[1] != self.cfg.feature_dim:
            raise ValueError(
                f"features have width {feats.shape[1]}, the drafter expects {self.cfg.feature_dim}"
            )
        emb = self.embed(tokens)
        chunk = self._chunk
        for i in range(0, len(tokens), chunk):
            self._observe_chunk(tokens[i : i + chunk], feats[i : i + chunk], emb[i : i + chunk])
        self.ngram.observe(tokens)

    def _run_observe(
        self, feats: np.ndarray, emb: np.ndarray, pos0: int, state: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        n = len(feats)
        feeds = {
            "features": feats[None],
            "token_emb": emb[None],
            "pos0": np.array([pos0], dtype=np.int64),
            "valid": np.ones((1, n), dtype=np.float32),
        }
        if state is not None:
            feeds["state"] = state
        return dict(zip(self._observe_outputs, self._observe.run(None, feeds), strict=True))

    def _observe_chunk(self, tokens: list[int], feats: np.ndarray, emb: np.ndarray) -> None:
        # "last L" memories are rebuilt from their inputs at propose time; "all" folds forward
        carry = self._state is not None and self._hist_len is None
        state_in = (
            self._state if carry else (None if self._state is None else np.zeros_like(self._state))
        )
        outs = self._run_observe(feats, emb, self._n, state_in)
        if carry:
            self._state = outs["state_out"]
        ptr = outs["ctx_ptr"][0] if "ctx_ptr" in outs else None
        self._append(tokens, outs["ctx_kv"][0], ptr)
        if self._hist_len is not None:
            self._push_history(feats, emb)
        self._n += len(tokens)

    def _grow(self, need: int) -> None:
        cap = max(2 * self._cap, need)
        extra = cap - self._cap
        self._kv = np.pad(self._kv, ((0, 0), (0, 0), (0, extra), (0, 0)))
        self._ptr = np.pad(self._ptr, ((0, extra), (0, 0)))
        self._next = np.pad(self._next, (0, extra))
        self._cap = cap

    def _append(self, tokens: list[int], kv: np.ndarray, ptr: np.ndarray | None) -> None:
        """Add n entries (kv (layers, 2, n, d), ptr (n, P)), oldest dropped past the window."""
        n = len(tokens)
        if self._len:
            self._next[self._len - 1] = tokens[0]
        if self.cfg.attention == "full" and self._len + n > self._cap:
            self._grow(self._len + n)
        if n > self._cap:  # a chunk longer than the window keeps its newest entries
            kv, tokens = kv[:, :, -self._cap :], tokens[-self._cap :]
            ptr = None if ptr is None else ptr[-self._cap :]
            n = self._cap
        drop = max(0, self._len + n - self._cap)
        if drop:  # slide the window (W entries: a cheap copy)
            keep = self._len - drop
            self._kv[:, :, :keep] = self._kv[:, :, drop : self._len]
            self._ptr[:keep] = self._ptr[drop : self._len]
            self._next[:keep] = self._next[drop : self._len]
            self._len = keep
        s = self._len
        self._kv[:, :, s : s + n] = kv
        if ptr is not None:
            self._ptr[s : s + n] = ptr
        self._next[s : s + n - 1] = tokens[1:]
        self._len = s + n

    def _push_history(self, feats: np.ndarray, emb: np.ndarray) -> None:
        # "last L" memories see only the last L features: keep them, rebuild lazily
        hist = self._hist_len
        if hist == 1:
            self._hist_feat[:] = feats[-1:]
            self._hist_emb[:] = emb[-1:]
            self._hist_n = 1
        else:
            both = np.concatenate([self._hist_feat[: self._hist_n], feats])[-hist:]
            both_e = np.concatenate([self._hist_emb[: self._hist_n], emb])[-hist:]
            self._hist_n = len(both)
            self._hist_feat[: self._hist_n] = both
            self._hist_emb[: self._hist_n] = both_e
        self._state_dirty = True

    def _rebuild_state(self) -> None:
        state = np.zeros_like(self._state)
        n = self._hist_n
        pos0 = self._n - n
        chunk = self._chunk
        for i in range(0, n, chunk):
            outs = self._run_observe(
                self._hist_feat[i : min(n, i + chunk)],
                self._hist_emb[i : min(n, i + chunk)],
                pos0 + i,
                state,
            )
            state = outs["state_out"]
        self._state = state
        self._state_dirty = False

    def propose(self, anchor: int, max_tokens: int, *, with_logits: bool = True) -> Draft:
        if max_tokens <= 0:
            return Draft.empty()
        # short-block graphs run the anchor and n slots; others the whole block, scoring n
        n = min(max_tokens, self._n_slots)
        vocab_lp, copy_lp, copy_ids = self.propose_raw(anchor, n)
        if not with_logits:  # greedy: the winners without a scatter into the whole vocabulary
            tokens, top = self.mixture_argmax(vocab_lp, copy_lp, copy_ids)
            return Draft(tokens=tokens, bucket=confidence_bucket(top[:, None], np.zeros(n, int)))
        logits = self.mix_logits(vocab_lp, copy_lp, copy_ids)
        tokens = np.argmax(logits, axis=1).astype(np.int32)
        return Draft(tokens=tokens, logits=logits, bucket=confidence_bucket(logits, tokens))

    def mixture_argmax(
        self, vocab_lp: np.ndarray, copy_lp: np.ndarray | None, copy_ids: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per slot, the target id of highest mixture probability and its log-probability:
        the winner is the draft-vocabulary argmax or one of the copied ids, so only those
        candidates are scored (same result as argmax over mix_logits)."""
        rows = np.arange(vocab_lp.shape[0])
        vbest = np.argmax(vocab_lp, axis=1)
        vtok = self.draft_ids[vbest]
        vprob = np.exp(vocab_lp[rows, vbest].astype(np.float64))
        if copy_lp is None:
            return vtok.astype(np.int32), np.log(vprob)
        # every copied id's total: its copy mass (all entries with that id, summed by a sort,
        # not an (L x L) comparison: full attention copies from thousands of entries) plus
        # its draft-vocabulary probability; ties go to the lower id, as argmax over mix_logits
        # and the training side's HyFlashModel.mixture_argmax
        vocab = self.cfg.vocab_size
        flat = (rows[:, None] * vocab + copy_ids).ravel()
        uniq, inv = np.unique(flat, return_inverse=True)
        mass = np.bincount(inv, weights=np.exp(copy_lp.astype(np.float64)).ravel())
        row_u, id_u = uniq // vocab, uniq % vocab
        slot = self._draft_slot(id_u)
        score = mass + np.where(
            slot >= 0, np.exp(vocab_lp[row_u, np.maximum(slot, 0)].astype(np.float64)), 0
        )
        starts = np.searchsorted(row_u, rows)  # uniq is sorted, so grouped by row
        best_score = np.maximum.reduceat(score, starts)
        ties = np.flatnonzero(score == best_score[row_u])
        best = ties[np.searchsorted(row_u[ties], rows)]  # the lowest id among a row's best
        tokens, top = id_u[best], best_score
        # the draft-vocabulary winner, if no copied id has its id (else it is scored above)
        key = rows * vocab + vtok
        at = np.minimum(np.searchsorted(uniq, key), len(uniq) - 1)
        copied = uniq[at] == key
        v_score = np.where(copied, score[at], vprob)
        take_v = (v_score > top) | ((v_score == top) & (vtok < tokens))
        tokens = np.where(take_v, vtok, tokens)
        top = np.where(take_v, v_score, top)
        return tokens.astype(np.int32), np.log(top)

    def _draft_slot(self, ids: np.ndarray) -> np.ndarray:
        """Index of each target id in the draft vocabulary, -1 where it is not there."""
        pos = np.searchsorted(self._sorted_draft_ids, ids)
        pos = np.minimum(pos, len(self._sorted_draft_ids) - 1)
        hit = self._sorted_draft_ids[pos] == ids
        return np.where(hit, self._sorted_order[pos], -1)

    def propose_raw(
        self, anchor: int, n_out: int | None = None
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """One propose-graph call: draft-vocab log-probs (S, V_draft) and, with the copy
        path, copy log-probs (S, entries + 1) with their target ids, for the first
        S = n_out mask slots (all B-1 when None)."""
        cfg = self.cfg
        n_out = self._n_slots if n_out is None else min(n_out, self._n_slots)
        if self._state_dirty:
            self._rebuild_state()
        n_slots = n_out if self.pays_per_draft else self._n_slots
        length = self._len if cfg.attention == "full" else self._cap
        length = max(length, 1)  # an empty context still feeds one (masked) entry
        valid = np.zeros((1, length), dtype=np.float32)
        valid[0, : self._len] = 1.0
        feeds = {
            "anchor_emb": self.embed([anchor])[None],
            "pos": np.array([self._n], dtype=np.int64),
            "ctx_kv": self._kv[None, :, :, :length],
            "ctx_valid": valid,
        }
        if self._state is not None:
            feeds["state"] = self._state
        cand_ids = None
        if cfg.copy:
            cand_ids, match = self.ngram.candidates(anchor, n_slots)
            feeds["cand_emb"] = self.embed(cand_ids)[None]
            feeds["cand_match"] = match[None]
            feeds["ctx_ptr"] = self._ptr[None, :length]
        feeds["slots"] = np.arange(n_out, dtype=np.int64)
        outs = self._propose.run(
            None, {k: v for k, v in feeds.items() if k in self._propose_inputs}
        )
        vocab_lp = outs[0][0][:n_out]  # format-1 graphs score every slot
        if not cfg.copy:
            return vocab_lp, None, None
        copy_lp = outs[1][0][:n_out]  # (S, length + 1)
        nxt = self._next[:length].copy()
        if self._len:
            nxt[self._len - 1] = anchor  # the newest entry was followed by the anchor
        copy_ids = np.empty((n_out, length + 1), dtype=np.int64)
        copy_ids[:, :length] = nxt[None]
        copy_ids[:, length] = cand_ids[:n_out]
        return vocab_lp, copy_lp, copy_ids

    def mix_logits(
        self, vocab_lp: np.ndarray, copy_lp: np.ndarray | None, copy_ids: np.ndarray | None
    ) -> np.ndarray:
        """(B-1, target vocab) log-probabilities of the gated mixture; -inf off its support."""
        rows = vocab_lp.shape[0]
        vocab = self.cfg.vocab_size
        out = np.full((rows, vocab), -np.inf, dtype=np.float32)
        out[:, self.draft_ids] = vocab_lp
        if copy_lp is None:
            return out
        flat = (np.arange(rows)[:, None] * vocab + copy_ids).ravel()
        mass = np.exp(copy_lp.astype(np.float64)).ravel()
        uniq, inv = np.unique(flat, return_inverse=True)
        extra = np.bincount(inv, weights=mass)
        live = extra > 0
        uniq, extra = uniq[live], extra[live]
        view = out.reshape(-1)
        base = np.exp(view[uniq].astype(np.float64))
        with np.errstate(divide="ignore"):
            view[uniq] = np.log(base + extra).astype(np.float32)
        return out

    def memory_bytes(self) -> int:
        """Window (K/V, pointer keys, token ids) + recurrent state (+ the "last L" inputs)."""
        return int(draft_memory_bytes(self.cfg, self._n if self.cfg.attention == "full" else 0))

    def memory_breakdown(self) -> dict[str, int]:
        held = self._len if self.cfg.attention == "full" else self._cap
        per = self._kv[:, :, :1].nbytes + self._ptr[:1].nbytes + 16
        return {
            "window": held * per,
            "state": 0 if self._state is None else int(self._state.nbytes),
            "history_inputs": int(self._hist_feat.nbytes + self._hist_emb.nbytes),
            "ngram_index": self.ngram.nbytes(),
            "embedding_cache": self.embed.cached_bytes(),
        }
