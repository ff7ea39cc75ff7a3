"""The HyFlash drafter (and its baselines) as one torch module.

One block = [anchor, MASK x (B-1)] slots; slot k predicts the token k after the anchor.

  context entries   c_j = norm(W_f f_j + W_e emb(x_j)) for committed positions j < anchor
  local attention   slot queries attend to the last W entries (K/V per layer, RoPE at absolute
                    positions, so they are cached once per token) and, with cross_slot, to all
                    slots bidirectionally; "full" attention sees every entry (DFlash-style)
  recurrent memory  Mamba-2 / GDN scans the c_j into a fixed-size state; each layer's slots
                    read it with a query (a linear-attention read of the state)
  output            out_proj(h) in the target's hidden space through the target's frozen LM
                    head, restricted to the draft vocabulary
  copy path         a pointer over the window entries (entry j copies the token that followed
                    it, x_{j+1}: an induction head) and the n-gram lookup candidate of each slot
                    (fed in as an input embedding too), mixed with the vocabulary softmax by a
                    learned 3-way gate. Copies may name tokens outside the draft vocabulary.

The token embedding and LM head are frozen buffers (not saved in state_dict: they come from
the target GGUF); the graphs exported for the run time take embedding rows as inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.drafters.hyflash_card import DrafterConfig, draft_memory_bytes
from engine.drafters.ngram_index import ngram_candidates
from engine.training.ssm import make_memory

NEG = -1e9  # "log 0" that stays finite (no inf - inf = nan anywhere)


def rms_normalize(x: Tensor, eps: float = 1e-6) -> Tensor:
    # x / sqrt, not x * rsqrt: onnxruntime fuses this exported pattern (with the weight's Mul)
    # into one SimplifiedLayerNormalization node; rsqrt exports as Sqrt + Reciprocal, unfused
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return rms_normalize(x, self.eps) * self.weight


def rope(x: Tensor, pos: Tensor, base: float) -> Tensor:
    """Rotary embedding on the last dim of x; pos broadcasts against x.shape[:-1]."""
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    ang = pos.to(torch.float32)[..., None] * inv
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@dataclass
class SlotOutput:
    vocab_lp: Tensor  # (N, A, B-1, V_draft): log g_vocab + log softmax over the draft vocab
    copy_lp: Tensor | None  # (N, A, B-1, L+1): pointer entries then the lookup candidate
    copy_ids: Tensor | None  # (N, A, B-1, L+1) target ids of those copies


@dataclass
class TrainOutput:
    loss: Tensor  # scalar: decay-weighted NLL over reachable targets
    nll: Tensor  # (B-1,) mean NLL per slot (reachable targets)
    correct: Tensor  # (N, A, B-1) bool: mixture argmax == target
    target_valid: Tensor  # (N, A, B-1) bool: target inside the sequence
    reachable: Tensor  # (N, A, B-1) bool: target in the draft vocab or among the copies
    copy_gate: Tensor  # (N, A, B-1, 3) gate probabilities (vocab, pointer, candidate)
    trust_loss: Tensor  # scalar: BCE of the candidate's gate share vs. "the lookup is right"
    slots: SlotOutput  # the slots' distributions (soft_targets.distill_loss reads them)

    def slot_accuracy(self) -> Tensor:
        v = self.target_valid.float()
        return (self.correct.float() * v).sum((0, 1)) / v.sum((0, 1)).clamp(min=1)

    def acceptance_length(self) -> Tensor:
        """Mean 1 + leading correct slots over anchors with all targets valid (a greedy tau
        estimate per anchor; the walk over real decoding is the bench's job)."""
        full = self.target_valid.all(-1)
        lead = torch.cumprod(self.correct.long(), dim=-1).sum(-1).float() + 1
        return (lead * full).sum() / full.sum().clamp(min=1)


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, has_memory: bool) -> None:
        super().__init__()
        d, self.heads = cfg.d_model, cfg.n_heads
        self.head_dim = d // cfg.n_heads
        self.base = cfg.rope_base
        self.norm_attn = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ctx_k = nn.Linear(d, d, bias=False)
        self.ctx_v = nn.Linear(d, d, bias=False)
        self.has_memory = has_memory
        if has_memory:
            self.mem_heads, self.mem_key_dim = cfg.mem_heads, cfg.mem_key_dim
            self.norm_mem = RMSNorm(d)
            self.mem_q = nn.Linear(d, cfg.mem_heads * cfg.mem_key_dim, bias=False)
            self.mem_out_norm = RMSNorm(cfg.mem_value_dim)  # state scale varies with history
            self.mem_o = nn.Linear(cfg.mem_heads * cfg.mem_value_dim, d, bias=False)
        hidden = cfg.ffn_mult * d
        self.norm_ffn = RMSNorm(d)
        self.ffn_in = nn.Linear(d, 2 * hidden, bias=False)
        self.ffn_out = nn.Linear(hidden, d, bias=False)

    def context_kv(self, c: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """Entries c (..., L, d) at positions pos (..., L) -> K (RoPE'd), V as (..., L, d)."""
        shape = (*c.shape[:-1], self.heads, self.head_dim)
        k = rope(self.ctx_k(c).view(shape), pos[..., None], self.base).flatten(-2)
        return k, self.ctx_v(c)

    def _heads(self, x: Tensor) -> Tensor:  # (N, A, L, d) -> (N, A, H, L, Dh)
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(-2, -3)

    def forward(
        self,
        h: Tensor,
        slot_pos: Tensor,
        ctx_k: Tensor,
        ctx_v: Tensor,
        ctx_bias: Tensor,
        slot_bias: Tensor,
        memory,
        state: Tensor | None,
    ) -> Tensor:
        """h (N, A, B, d); ctx_k/ctx_v (N, A or 1, L, d); ctx_bias (N, A, L) additive;
        slot_bias (B, B) additive; state (N, A, Hm, Dk, Dv)."""
        x = self.norm_attn(h)
        shape = (*x.shape[:-1], self.heads, self.head_dim)
        q = rope(self.q(x).view(shape), slot_pos[..., None], self.base).transpose(-2, -3)
        k = rope(self.k(x).view(shape), slot_pos[..., None], self.base).transpose(-2, -3)
        v = self._heads(self.v(x))
        ck, cv = self._heads(ctx_k), self._heads(ctx_v)
        scale = 1.0 / math.sqrt(self.head_dim)
        # context shared by all anchors ("full"): contract without copying it per anchor
        sub = "nhld" if ck.shape[1] == 1 and q.shape[1] > 1 else "nahld"
        if sub == "nhld":
            ck, cv = ck[:, 0], cv[:, 0]
        s_ctx = torch.einsum(f"nahbd,{sub}->nahbl", q, ck) * scale + ctx_bias[:, :, None, None]
        s_slot = q @ k.transpose(-1, -2) * scale + slot_bias
        p = torch.softmax(torch.cat([s_ctx, s_slot], dim=-1), dim=-1)
        n_ctx = s_ctx.shape[-1]
        att = torch.einsum(f"nahbl,{sub}->nahbd", p[..., :n_ctx], cv) + p[..., n_ctx:] @ v
        h = h + self.o(att.transpose(-2, -3).flatten(-2))
        if self.has_memory:
            mq = self.mem_q(self.norm_mem(h)).unflatten(-1, (self.mem_heads, self.mem_key_dim))
            r = memory.read(mq, state[:, :, None])  # (N, A, B, Hm, Dv)
            h = h + self.mem_o(self.mem_out_norm(r).flatten(-2))
        a, b = self.ffn_in(self.norm_ffn(h)).chunk(2, dim=-1)
        return h + self.ffn_out(F.silu(a) * b)


class HyFlashModel(nn.Module):
    def __init__(
        self,
        cfg: DrafterConfig,
        embedding: Tensor | np.ndarray,
        lm_head: Tensor | np.ndarray,
        draft_ids: Tensor | np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        embedding = torch.as_tensor(embedding, dtype=torch.float32)
        lm_head = torch.as_tensor(lm_head, dtype=torch.float32)
        if embedding.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ValueError(
                f"embedding {tuple(embedding.shape)} does not match the config "
                f"({cfg.vocab_size}, {cfg.hidden_size})"
            )
        if lm_head.shape != embedding.shape:
            raise ValueError("LM head and embedding shapes differ")
        if draft_ids is None:
            if cfg.draft_vocab_size:
                raise ValueError("draft_vocab_size > 0 needs draft_ids (draft -> target map)")
            draft_ids = torch.arange(cfg.vocab_size)
        draft_ids = torch.as_tensor(np.asarray(draft_ids), dtype=torch.int64)
        if draft_ids.numel() != cfg.n_draft_vocab or draft_ids.unique().numel() != len(draft_ids):
            raise ValueError(f"draft_ids must be {cfg.n_draft_vocab} distinct target ids")
        t2d = torch.full((cfg.vocab_size,), -1, dtype=torch.int64)
        t2d[draft_ids] = torch.arange(len(draft_ids))
        # frozen target parts: rebuilt from the GGUF, never saved in checkpoints
        self.register_buffer("embedding", embedding, persistent=False)
        self.register_buffer("lm_head_t", lm_head[draft_ids].t().contiguous(), persistent=False)
        self.register_buffer("draft_ids", draft_ids)
        self.register_buffer("target_to_draft", t2d)

        d, e = cfg.d_model, cfg.hidden_size
        self.ctx_feat = nn.Linear(cfg.feature_dim, d)
        self.ctx_tok = nn.Linear(e, d, bias=False)
        self.ctx_norm = RMSNorm(d)
        self.memory = make_memory(cfg.memory, d, cfg.mem_heads, cfg.mem_key_dim, cfg.mem_value_dim)
        self.anchor_in = nn.Linear(e, d, bias=False)
        self.mask_emb = nn.Parameter(torch.randn(d) * 0.02)
        self.slot_emb = nn.Parameter(torch.randn(cfg.block_size, d) * 0.02)
        if cfg.copy:
            self.cand_in = nn.Linear(e, d, bias=False)
            self.match_emb = nn.Embedding(cfg.max_ngram + 1, d)
            nn.init.normal_(self.match_emb.weight, std=0.02)
            self.ptr_q = nn.Linear(d, cfg.ptr_dim, bias=False)
            self.ptr_k = nn.Linear(d, cfg.ptr_dim, bias=False)
            self.gate = nn.Linear(d, 3)
        self.layers = nn.ModuleList(
            DrafterLayer(cfg, self.memory is not None) for _ in range(cfg.n_layers)
        )
        self.norm_out = RMSNorm(d)
        self.out_proj = nn.Linear(d, e, bias=False)
        idx = torch.arange(cfg.block_size)
        slot_bias = torch.zeros(cfg.block_size, cfg.block_size)
        if not cfg.cross_slot:  # each slot sees the context and itself only
            slot_bias = torch.where(idx[:, None] == idx[None, :], 0.0, NEG)
        elif cfg.causal_slots:  # ... and the slots before it
            slot_bias = torch.where(idx[None, :] <= idx[:, None], 0.0, NEG)
        self.register_buffer("slot_bias", slot_bias, persistent=False)
        w = cfg.gamma ** torch.arange(cfg.n_slots, dtype=torch.float32)
        self.register_buffer("slot_weight", w, persistent=False)

    # ----- construction -------------------------------------------------------------------

    @classmethod
    def from_gguf(
        cls, cfg: DrafterConfig, gguf_path: str | Path, draft_ids: np.ndarray | None = None
    ) -> HyFlashModel:
        """Frozen embedding and LM head from the target GGUF (checked against the config)."""
        from engine.training.gguf_weights import load_target_weights

        weights = load_target_weights(gguf_path)
        return cls(cfg, weights.embedding, weights.lm_head, draft_ids)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # lm_head_t was sliced with this model's draft ids: a checkpoint with others can't fit
        ids = state_dict.get(prefix + "draft_ids")
        if ids is not None and not torch.equal(ids.cpu(), self.draft_ids.cpu()):
            raise ValueError(
                "the checkpoint's draft vocabulary differs from this model's: build the model "
                "with the checkpoint's draft_ids"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def folded_head(self) -> Tensor:
        """out_proj and the frozen LM head as one (d, V_d) matrix: fewer FLOPs when d < hidden."""
        return (self.out_proj.weight.t() @ self.lm_head_t).detach()

    def num_trainable(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def memory_bytes(self, n_context: int) -> int:
        return draft_memory_bytes(self.cfg, n_context)

    # ----- pieces shared by training and the exported graphs -------------------------------

    def embed(self, ids: Tensor) -> Tensor:
        return self.embedding[ids]

    def context_entries(self, features: Tensor, token_emb: Tensor) -> Tensor:
        if self.cfg.feature_layers:
            # fused: the captured layers are raw residual streams whose scale grows with
            # depth (mean |x| ~2 at layer 4, ~13 at layer 26 of SmolLM2-135M); normalise each
            # to unit RMS so one does not drown the others. The final state is normed already.
            e = self.cfg.hidden_size
            raw, final = features[..., :-e], features[..., -e:]
            raw = raw.unflatten(-1, (len(self.cfg.feature_layers), e))
            raw = rms_normalize(raw)
            features = torch.cat([raw.flatten(-2), final], dim=-1)
        return self.ctx_norm(self.ctx_feat(features) + self.ctx_tok(token_emb))

    def context_cache(
        self, c: Tensor, pos: Tensor
    ) -> tuple[list[tuple[Tensor, Tensor]], Tensor | None]:
        """Per-layer (K, V) (..., L, d) and pointer keys (..., L, P) of entries at pos."""
        kv = [layer.context_kv(c, pos) for layer in self.layers]
        ptr = rope(self.ptr_k(c), pos, self.cfg.rope_base) if self.cfg.copy else None
        return kv, ptr

    def slot_inputs(
        self,
        anchor_emb: Tensor,
        cand_emb: Tensor | None,
        cand_match: Tensor | None,
        n_mask: int | None = None,
    ) -> Tensor:
        """anchor_emb (N, A, E), cand_emb (N, A, S, E), cand_match (N, A, S) -> (N, A, S+1, d)
        for the first S = n_mask mask slots (all B-1 when None; fewer only for short_blocks)."""
        n_mask = self.cfg.n_slots if n_mask is None else n_mask
        first = self.anchor_in(anchor_emb)[:, :, None]
        rest = self.mask_emb.expand(*anchor_emb.shape[:2], n_mask, -1)
        if self.cfg.copy:
            has = (cand_match > 0).to(cand_emb.dtype)[..., None]
            rest = rest + self.cand_in(cand_emb) * has + self.match_emb(cand_match)
        return torch.cat([first, rest], dim=2) + self.slot_emb[: n_mask + 1]

    def run_block(
        self,
        slot_x: Tensor,
        slot_pos: Tensor,
        ctx_kv: list[tuple[Tensor, Tensor]],
        ctx_ptr: Tensor | None,
        ctx_valid: Tensor,
        state: Tensor | None,
        cand_match: Tensor | None,
        head: Tensor | None = None,
        out_slots: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        """Run one block [anchor, MASK x (B-1)] against a prepared context (per-layer K/V,
        pointer keys, memory state): the slots' log-probabilities. Training reaches it through
        draft_at_anchors, the exported propose graph directly. ctx tensors may have A = 1
        (shared by all anchors: "full").
        head: out_proj folded into the LM head, (d, V_d) (the exporter's, when d < hidden).
        out_slots: indices of the mask slots to score (all when None): every slot still takes
        part in the block's attention, only the heads (LM head, pointer, gate) are skipped for
        the others, so the scored slots' outputs are unchanged. S = the slots scored.
        Returns vocab_lp (N, A, S, V_d), copy_lp (N, A, S, L+1) or None, gate (.., 3)."""
        ctx_bias = (1.0 - ctx_valid) * NEG  # (N, A, L)
        h = slot_x
        rows = slot_x.shape[2]  # block_size, or fewer for a short block (short_blocks)
        slot_bias = self.slot_bias[:rows, :rows]
        for layer, (ck, cv) in zip(self.layers, ctx_kv, strict=True):
            h = layer(h, slot_pos, ck, cv, ctx_bias, slot_bias, self.memory, state)
        h = h[:, :, 1:]  # the mask slots
        mask_pos = slot_pos[:, :, 1:]
        if out_slots is not None:
            h = h.index_select(2, out_slots)
            mask_pos = mask_pos.index_select(2, out_slots)
            cand_match = None if cand_match is None else cand_match.index_select(2, out_slots)
        h = self.norm_out(h)
        if head is None:
            logits = self.out_proj(h) @ self.lm_head_t  # (N, A, B-1, V_d)
        else:
            logits = h @ head
        vocab_lp = torch.log_softmax(logits, dim=-1)
        if not self.cfg.copy:
            return vocab_lp, None, torch.ones_like(vocab_lp[..., :1])
        q = rope(self.ptr_q(h), mask_pos, self.cfg.rope_base)  # (N, A, S, P)
        scores = q @ ctx_ptr.transpose(-1, -2) / math.sqrt(self.cfg.ptr_dim)  # (N, A, S, L)
        ptr_lp = torch.log_softmax(scores + ctx_bias[:, :, None, :], dim=-1)
        any_ctx = ctx_valid.amax(-1)[:, :, None]  # (N, A, 1)
        gate_bias = torch.stack(
            [
                torch.zeros_like(cand_match, dtype=h.dtype),
                ((1.0 - any_ctx) * NEG).expand_as(cand_match),
                torch.where(cand_match > 0, 0.0, NEG),
            ],
            dim=-1,
        )
        log_gate = torch.log_softmax(self.gate(h) + gate_bias, dim=-1)
        vocab_lp = vocab_lp + log_gate[..., :1]
        copy_lp = torch.cat([ptr_lp + log_gate[..., 1:2], log_gate[..., 2:]], dim=-1)
        return vocab_lp, copy_lp, log_gate.exp()

    # ----- training forward --------------------------------------------------------------

    def draft_at_anchors(
        self,
        features: Tensor,
        tokens: Tensor,
        anchors: Tensor,
        *,
        lengths: Tensor | None = None,
        cand_ids: Tensor | None = None,
        cand_match: Tensor | None = None,
    ) -> tuple[SlotOutput, Tensor]:
        """Teacher-forced drafts: build each anchor's context from its sequence (window K/V,
        memory state, lookup candidates) and run the block there. Anchors (N, A) of sequences
        features (N, T, F), tokens (N, T); only context strictly before each anchor is used.
        cand_ids / cand_match: (N, T, B-1) lookup-candidate tables
        (hyflash_card.ngram_candidates); computed here when absent.
        Returns (SlotOutput, gate probabilities)."""
        cfg = self.cfg
        n, t = tokens.shape
        a_count = anchors.shape[1]
        dev = tokens.device
        if lengths is None:
            lengths = torch.full((n,), t, dtype=torch.int64, device=dev)
        seq_valid = (torch.arange(t, device=dev)[None] < lengths[:, None]).to(features.dtype)
        emb = self.embed(tokens)
        c = self.context_entries(features, emb)  # (N, T, d)
        pos = torch.arange(t, device=dev, dtype=torch.float32).expand(n, t)
        kv, ptr = self.context_cache(c, pos)
        bidx = torch.arange(n, device=dev)[:, None, None]
        nxt = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)  # token that followed entry j

        if cfg.attention == "local":
            idx = anchors[..., None] - cfg.window + torch.arange(cfg.window, device=dev)
            ctx_valid = (idx >= 0).to(features.dtype)
            idx = idx.clamp(min=0)  # (N, A, W)
            ctx_kv = [(k[bidx, idx], v[bidx, idx]) for k, v in kv]
            ctx_ptr = ptr[bidx, idx] if ptr is not None else None
            ctx_next = nxt[bidx, idx]  # (N, A, W)
        else:
            j = torch.arange(t, device=dev)
            ctx_valid = (j[None, None] < anchors[..., None]).to(features.dtype)  # (N, A, T)
            ctx_kv = [(k[:, None], v[:, None]) for k, v in kv]
            ctx_ptr = ptr[:, None] if ptr is not None else None
            ctx_next = nxt[:, None].expand(n, a_count, t)

        state = self._states_at(c, seq_valid, anchors) if self.memory is not None else None

        anchor_emb = emb[torch.arange(n, device=dev)[:, None], anchors]  # (N, A, E)
        cand_emb = c_ids = c_match = None
        if cfg.copy:
            if cand_ids is None or cand_match is None:
                cand_ids, cand_match = self.candidate_tables(tokens)
            rows = torch.arange(n, device=dev)[:, None]
            c_ids, c_match = cand_ids[rows, anchors], cand_match[rows, anchors]  # (N, A, B-1)
            cand_emb = self.embed(c_ids)
        slot_x = self.slot_inputs(anchor_emb, cand_emb, c_match)
        slot_pos = (anchors[..., None] + torch.arange(cfg.block_size, device=dev)).float()
        vocab_lp, copy_lp, gate = self.run_block(
            slot_x, slot_pos, ctx_kv, ctx_ptr, ctx_valid, state, c_match
        )
        copy_ids = None
        if cfg.copy:
            ctx_next = torch.where(ctx_valid > 0, ctx_next, 0)  # masked entries copy nothing
            ptr_ids = ctx_next[:, :, None, :].expand(n, a_count, cfg.n_slots, -1)
            copy_ids = torch.cat([ptr_ids, c_ids[..., None]], dim=-1)
        return SlotOutput(vocab_lp, copy_lp, copy_ids), gate

    def _states_at(self, c: Tensor, seq_valid: Tensor, anchors: Tensor) -> Tensor:
        """Memory state after the entries the memory may see before each anchor."""
        hist = self.cfg.history_len
        chunk = self.cfg.scan_chunk
        if hist is None:  # one chunked scan per sequence, states gathered at the anchors
            return self.memory.scan(c, valid=seq_valid, chunk=chunk).states_at(anchors)
        n, a_count = anchors.shape
        idx = anchors[..., None] - hist + torch.arange(hist, device=c.device)  # (N, A, L)
        valid = (idx >= 0).to(c.dtype)
        x = c[torch.arange(n, device=c.device)[:, None, None], idx.clamp(min=0)]
        sc = self.memory.scan(x.flatten(0, 1), valid=valid.flatten(0, 1), chunk=chunk)
        return sc.final.unflatten(0, (n, a_count))

    def candidate_tables(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        ids, match = zip(
            *(
                ngram_candidates(row.tolist(), self.cfg.n_slots, self.cfg.max_ngram)
                for row in tokens.cpu()
            ),
            strict=True,
        )
        return (
            torch.as_tensor(np.stack(ids), device=tokens.device),
            torch.as_tensor(np.stack(match), device=tokens.device),
        )

    def forward_train(
        self,
        features: Tensor,
        tokens: Tensor,
        anchors: Tensor,
        *,
        lengths: Tensor | None = None,
        cand_ids: Tensor | None = None,
        cand_match: Tensor | None = None,
        labels: Tensor | None = None,
        slot_mask: Tensor | None = None,
    ) -> TrainOutput:
        """Loss of slot k predicting tokens[anchor + k] (or labels[anchor + k]: what the target
        predicts there, for text the target did not write), weighted gamma**(k-1); slot_mask
        (N, A, B-1) bool leaves the False slots out (soft_targets.own_text_mask)."""
        out, gate = self.draft_at_anchors(
            features, tokens, anchors, lengths=lengths, cand_ids=cand_ids, cand_match=cand_match
        )
        n, t = tokens.shape
        if lengths is None:
            lengths = torch.full((n,), t, dtype=torch.int64, device=tokens.device)
        k = torch.arange(1, self.cfg.block_size, device=tokens.device)
        tpos = anchors[..., None] + k  # (N, A, B-1)
        target_valid = tpos < lengths[:, None, None]
        if slot_mask is not None:
            target_valid = target_valid & slot_mask
        y = (tokens if labels is None else labels)[
            torch.arange(n, device=tokens.device)[:, None, None], tpos.clamp(max=t - 1)
        ]
        lp_y, reachable = self.target_logprob(out, y)
        use = (target_valid & reachable).float()
        w = use * self.slot_weight
        loss = -(lp_y * w).sum() / w.sum().clamp(min=1e-6)
        nll = -(lp_y * use).sum((0, 1)) / use.sum((0, 1)).clamp(min=1)
        with torch.no_grad():  # a metric: nothing to keep for the backward pass
            pred = self.mixture_argmax(out)
        return TrainOutput(
            loss=loss,
            nll=nll.detach(),
            correct=(pred == y) & target_valid,
            target_valid=target_valid,
            reachable=reachable,
            copy_gate=gate,
            trust_loss=self.trust_loss(out, y, target_valid),
            slots=out,
        )

    @staticmethod
    def trust_loss(out: SlotOutput, y: Tensor, target_valid: Tensor) -> Tensor:
        """Copy-path trust: the gate's candidate share as a classifier of "the n-gram lookup
        candidate is the next token" (binary cross-entropy over slots that have a candidate).
        The NLL alone never asks the gate to move once the vocabulary also names the token,
        so on repeats the learned drafter trailed plain lookup; this asks it to."""
        if out.copy_lp is None:
            return y.new_zeros((), dtype=torch.float32)
        log_g = out.copy_lp[..., -1]  # NEG where the lookup found no match
        has = target_valid & (log_g > NEG / 2)
        hit = out.copy_ids[..., -1] == y
        log_not = torch.log1p(-log_g.exp().clamp(max=1 - 1e-6))
        bce = -torch.where(hit, log_g, log_not)
        return torch.where(has, bce, 0.0).sum() / has.sum().clamp(min=1)

    # ----- the mixture over target ids -----------------------------------------------------

    def target_logprob(self, out: SlotOutput, y: Tensor) -> tuple[Tensor, Tensor]:
        """log p_mixture(y) for target ids y (..., ) and whether y is reachable at all."""
        d = self.target_to_draft[y]
        in_vocab = d >= 0
        lp_v = out.vocab_lp.gather(-1, d.clamp(min=0)[..., None])[..., 0]
        lp_v = torch.where(in_vocab, lp_v, torch.full_like(lp_v, NEG))
        if out.copy_lp is None:
            return lp_v, in_vocab
        hit = out.copy_ids == y[..., None]
        lp_c = torch.where(hit, out.copy_lp, torch.full_like(out.copy_lp, NEG))
        lp = torch.logsumexp(torch.cat([lp_v[..., None], lp_c], dim=-1), dim=-1)
        return lp, in_vocab | hit.any(-1)

    def mixture_argmax(self, out: SlotOutput) -> Tensor:
        """Target id with the highest mixture probability, without a target-vocab scatter:
        the winner is either the draft-vocab argmax or one of the copied ids. Ties go to the
        lower id, as in the run time's HyFlashDrafter.mixture_argmax and its argmax over the
        whole mixture (the draft vocabulary is sorted, so its first argmax is its lowest id)."""
        # maxima and gathers in log space, as the run time's argmax; exp of the winners only
        vbest, vidx = out.vocab_lp.max(-1)
        vbest = vbest.exp()
        vtok = self.draft_ids[vidx]
        if out.copy_lp is None:
            return vtok
        p_copy = out.copy_lp.exp()
        ids = out.copy_ids
        # mass of each entry's id: segment sums over the sorted ids (linear memory, which
        # matters for full attention, where entries span the whole context)
        sorted_ids, order = ids.sort(-1)
        starts = torch.ones_like(sorted_ids, dtype=torch.bool)
        starts[..., 1:] = sorted_ids[..., 1:] != sorted_ids[..., :-1]
        segment = starts.cumsum(-1) - 1
        sorted_p = p_copy.gather(-1, order)
        seg_mass = torch.zeros_like(sorted_p).scatter_add(-1, segment, sorted_p)
        copy_total = torch.empty_like(p_copy).scatter(-1, order, seg_mass.gather(-1, segment))
        d = self.target_to_draft[ids]
        pv_in = out.vocab_lp.gather(-1, d.clamp(min=0)).exp()
        pv = torch.where(d >= 0, pv_in, torch.zeros_like(p_copy))
        score = copy_total + pv
        cbest = score.amax(-1)
        ctok = torch.where(score == cbest[..., None], ids, self.cfg.vocab_size).amin(-1)
        # the vocabulary winner's total is its copied entries' score when it was copied
        vcopied = ids == vtok[..., None]
        vscore = torch.where(vcopied.any(-1), torch.where(vcopied, score, -1.0).amax(-1), vbest)
        take_c = (cbest > vscore) | ((cbest == vscore) & (ctok < vtok))
        return torch.where(take_c, ctok, vtok)

    def mixture_logprobs(self, out: SlotOutput) -> Tensor:
        """Full (..., target vocab) log-probabilities (tests / small batches only)."""
        lead = out.vocab_lp.shape[:-1]
        p = torch.zeros(
            *lead, self.cfg.vocab_size, dtype=out.vocab_lp.dtype, device=out.vocab_lp.device
        )
        p[..., self.draft_ids] = out.vocab_lp.exp()
        if out.copy_lp is not None:
            p = p.scatter_add(-1, out.copy_ids, out.copy_lp.exp())
        return torch.log(p)

    # ----- reference for one context (what the run time must reproduce) --------------------

    @torch.no_grad()
    def propose_reference(self, features: Tensor, tokens: Tensor, anchor: int) -> SlotOutput:
        """Slot outputs for a whole context (T, F), (T,) and the anchor that follows it."""
        t = tokens.shape[0]
        feats = torch.cat([features, features.new_zeros(1, features.shape[1])])[None]
        toks = torch.cat([tokens, tokens.new_tensor([anchor])])[None]
        out, _ = self.draft_at_anchors(feats, toks, torch.tensor([[t]], device=tokens.device))
        return out
