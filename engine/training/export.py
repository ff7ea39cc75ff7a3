"""Export a trained HyFlashModel to the run-time folder read by engine.drafters.hyflash.

Two ONNX graphs (opset 18, exported from the torch module by torch.onnx's dynamo exporter):

  observe  features (1, n, F), token_emb (1, n, E), pos0 (1,), valid (1, n)[, state]
           -> ctx_kv (1, layers, 2, n, d) [, ctx_ptr (1, n, P)] [, state_out]
           n <= observe_chunk new committed tokens: their per-layer K/V (RoPE at pos0 + i)
           and pointer keys for the window, and the memory state folded forward.
  propose  anchor_emb (1, 1, E), pos (1,), ctx_kv (1, layers, 2, L, d), ctx_valid (1, L)
           [, state] [, cand_emb (1, B-1, E), cand_match (1, B-1), ctx_ptr (1, L, P)],
           slots (S,) int64
           -> vocab_logprobs (1, S, V_draft) [, copy_logprobs (1, S, L+1)]
           slots: which mask slots to score (usually 0..S-1, S = the block about to be
           verified minus one). All B-1 slots run through the block; only the scored ones
           pay for the heads, the LM head over the draft vocabulary being the costliest
           node (card format 2; format-1 graphs have no `slots` and score all).
           Short blocks (card "short_blocks", config.short_blocks: no slot sees a later
           one): slots must be 0..S-1, cand_emb / cand_match hold S rows, and only the
           anchor and those S slots run.

The window itself lives in numpy at run time (it is a cache of observe outputs), so the
graphs are stateless. Embedding rows are inputs: the run time reads them from the target GGUF
instead of shipping a second copy of a (vocab x hidden) matrix.

Folder: model_propose.onnx, model_observe.onnx (+ .int8 / .int4 variants), draft_vocab.npy,
card.json (target identity, config, data, metrics, files).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from engine.drafters import hyflash_card
from engine.drafters.hyflash_card import DrafterConfig, TargetIdentity, draft_memory_bytes
from engine.training.model import HyFlashModel

OPSET = 18


class ObserveGraph(nn.Module):
    def __init__(self, model: HyFlashModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        features: Tensor,
        token_emb: Tensor,
        pos0: Tensor,
        valid: Tensor,
        state: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        m = self.model
        n = features.shape[1]
        c = m.context_entries(features, token_emb)  # (1, n, d)
        pos = (pos0 + torch.arange(n, device=pos0.device)).to(torch.float32)[None]
        kv, ptr = m.context_cache(c, pos)
        ctx_kv = torch.stack([torch.stack(pair, dim=1) for pair in kv], dim=1)
        outs: list[Tensor] = [ctx_kv]
        if ptr is not None:
            outs.append(ptr)
        if m.memory is not None:
            outs.append(m.memory.chunk_update(c, state, valid))
        return tuple(outs)


class ProposeGraph(nn.Module):
    def __init__(self, model: HyFlashModel) -> None:
        super().__init__()
        self.model = model
        # d -> hidden -> vocab costs d*hidden + hidden*V per slot; folded, d*V
        cfg = model.cfg
        self.fold = cfg.d_model < cfg.hidden_size
        if self.fold:
            self.register_buffer("head", model.folded_head(), persistent=False)

    def forward(
        self,
        anchor_emb: Tensor,
        pos: Tensor,
        ctx_kv: Tensor,
        ctx_valid: Tensor,
        state: Tensor | None = None,
        cand_emb: Tensor | None = None,
        cand_match: Tensor | None = None,
        ctx_ptr: Tensor | None = None,
        slots: Tensor | None = None,
    ) -> tuple[Tensor, ...]:
        m = self.model
        cfg = m.cfg
        kv = [(ctx_kv[:, i, 0][:, None], ctx_kv[:, i, 1][:, None]) for i in range(cfg.n_layers)]
        # short blocks: the anchor and the S scored slots only (slots = 0..S-1, candidates
        # for those S); otherwise the whole trained block runs and `slots` picks the scored
        n_mask = slots.shape[0] if cfg.short_blocks else cfg.n_slots
        slot_pos = (pos + torch.arange(n_mask + 1, device=pos.device)).to(torch.float32)
        slot_pos = slot_pos[None, None]  # (1, 1, rows)
        if cfg.copy:
            cand_emb, cand_match, ctx_ptr = cand_emb[:, None], cand_match[:, None], ctx_ptr[:, None]
        slot_x = m.slot_inputs(anchor_emb, cand_emb, cand_match, n_mask)
        st = state[:, None] if state is not None else None
        vocab_lp, copy_lp, _ = m.run_block(
            slot_x,
            slot_pos,
            kv,
            ctx_ptr,
            ctx_valid[:, None],
            st,
            cand_match,
            head=self.head if self.fold else None,
            out_slots=None if cfg.short_blocks else slots,
        )
        if copy_lp is None:
            return (vocab_lp[:, 0],)
        return vocab_lp[:, 0], copy_lp[:, 0]


def graph_io(cfg: DrafterConfig) -> dict[str, dict[str, list[str]]]:
    """Input/output names of both graphs, in order (the card records them)."""
    obs_in = ["features", "token_emb", "pos0", "valid"]
    obs_out = ["ctx_kv"]
    prop_in = ["anchor_emb", "pos", "ctx_kv", "ctx_valid"]
    prop_out = ["vocab_logprobs"]
    if cfg.copy:
        obs_out.append("ctx_ptr")
        prop_out.append("copy_logprobs")
    if cfg.memory != "none":
        obs_in.append("state")
        obs_out.append("state_out")
        prop_in.append("state")
    if cfg.copy:
        prop_in += ["cand_emb", "cand_match", "ctx_ptr"]
    prop_in.append("slots")
    return {
        "observe": {"inputs": obs_in, "outputs": obs_out},
        "propose": {"inputs": prop_in, "outputs": prop_out},
    }


def example_inputs(
    cfg: DrafterConfig,
    n_new: int | None = None,
    n_ctx: int | None = None,
    seed: int = 0,
    n_out: int | None = None,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Random inputs for both graphs (export tracing and tests); n_out: slots scored (all)."""
    g = torch.Generator().manual_seed(seed)
    n_out = cfg.n_slots if n_out is None else n_out
    n_cand = n_out if cfg.short_blocks else cfg.n_slots
    n = n_new or cfg.observe_chunk
    length = n_ctx or cfg.window
    state = torch.randn(1, cfg.mem_heads, cfg.mem_key_dim, cfg.mem_value_dim, generator=g) * 0.1
    obs = {
        "features": torch.randn(1, n, cfg.feature_dim, generator=g),
        "token_emb": torch.randn(1, n, cfg.hidden_size, generator=g),
        "pos0": torch.tensor([length], dtype=torch.int64),
        "valid": torch.ones(1, n),
        "state": state,
    }
    prop = {
        "anchor_emb": torch.randn(1, 1, cfg.hidden_size, generator=g),
        "pos": torch.tensor([length], dtype=torch.int64),
        "ctx_kv": torch.randn(1, cfg.n_layers, 2, length, cfg.d_model, generator=g),
        "ctx_valid": torch.ones(1, length),
        "state": state,
        "cand_emb": torch.randn(1, n_cand, cfg.hidden_size, generator=g),
        "cand_match": torch.randint(0, cfg.max_ngram + 1, (1, n_cand), generator=g),
        "ctx_ptr": torch.randn(1, length, cfg.ptr_dim, generator=g),
        "slots": torch.arange(n_out),
    }
    io = graph_io(cfg)
    return (
        {k: obs[k] for k in io["observe"]["inputs"]},
        {k: prop[k] for k in io["propose"]["inputs"]},
    )


def _export_graph(
    module: nn.Module,
    inputs: dict[str, Tensor],
    outputs: list[str],
    dynamic: dict[str, dict[int, object]],
    path: Path,
) -> None:
    torch.onnx.export(
        module.eval(),
        args=(),
        kwargs=inputs,
        f=str(path),
        input_names=list(inputs),
        output_names=outputs,
        dynamic_shapes={k: dynamic.get(k) for k in inputs},
        opset_version=OPSET,
        dynamo=True,
        external_data=False,
        optimize=True,
        verbose=False,
    )


def export_onnx(model: HyFlashModel, out_dir: str | Path) -> dict[str, Path]:
    """Export the fp32 observe and propose graphs; returns {"observe": path, "propose": path}."""
    cfg = model.cfg
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    io = graph_io(cfg)
    # a scored-slot count strictly inside 1..B-1, so the exporter keeps it symbolic
    obs_in, prop_in = example_inputs(cfg, n_out=min(cfg.n_slots, max(2, cfg.n_slots - 1)))
    dim = torch.export.Dim
    # GDN's in-chunk inverse is a fixed number of squarings: n is bounded by observe_chunk
    n_max = cfg.observe_chunk if cfg.memory == "gdn" else None
    n_dim = dim("n_new", min=1, max=n_max) if n_max else dim("n_new", min=1)
    l_dim = dim("n_ctx", min=1)
    obs_dyn = {"features": {1: n_dim}, "token_emb": {1: n_dim}, "valid": {1: n_dim}}
    s_dim = dim("n_scored", min=1, max=cfg.n_slots)
    prop_dyn = {
        "ctx_kv": {3: l_dim},
        "ctx_valid": {1: l_dim},
        "ctx_ptr": {1: l_dim},
        "slots": {0: s_dim},
    }
    if cfg.short_blocks:  # one candidate per scored slot
        prop_dyn |= {"cand_emb": {1: s_dim}, "cand_match": {1: s_dim}}
    paths = {
        "observe": out / hyflash_card.OBSERVE_ONNX,
        "propose": out / hyflash_card.PROPOSE_ONNX,
    }
    old = model.memory.inverse_method if model.memory is not None else None
    try:
        if model.memory is not None:
            model.memory.inverse_method = f"doubling:{cfg.observe_chunk}"
        with torch.no_grad():
            _export_graph(
                ObserveGraph(model), obs_in, io["observe"]["outputs"], obs_dyn, paths["observe"]
            )
            _export_graph(
                ProposeGraph(model), prop_in, io["propose"]["outputs"], prop_dyn, paths["propose"]
            )
    finally:
        if model.memory is not None:
            model.memory.inverse_method = old
    return paths


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic INT8: weights stored int8 (per channel), activations quantized on the fly."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QUInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul", "Gemm"],
    )
    return dst


def quantize_int4(src: Path, dst: Path, block_size: int = 32) -> Path:
    """Weight-only INT4 (MatMulNBits, blockwise symmetric), onnxruntime's own quantizer."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quant = MatMulNBitsQuantizer(
        onnx.load(str(src)), bits=4, block_size=block_size, is_symmetric=True, accuracy_level=4
    )
    quant.process()
    quant.model.save_model_to_file(str(dst), use_external_data_format=False)
    return dst


def export_drafter(
    model: HyFlashModel,
    out_dir: str | Path,
    *,
    target: TargetIdentity | dict,
    name: str = "hyflash",
    data: str | dict = "",
    metrics: dict | None = None,
    quantize: Sequence[str] = ("int8",),
    default_weights: str | None = None,
) -> Path:
    """Write the run-time folder: fp32 graphs (+ "int8" / "int4" variants), draft_vocab.npy,
    card.json. `target` is the identity of the GGUF the model was trained against
    (hyflash_card.target_identity(path)); `data` describes the training data; `metrics`
    whatever the evaluation measured (tau per block size, slot accuracy, ...)."""
    cfg = model.cfg
    out = Path(out_dir)
    paths = export_onnx(model, out)
    files: dict[str, dict[str, str]] = {g: {"fp32": p.name} for g, p in paths.items()}
    for kind in quantize:
        fn = {"int8": quantize_int8, "int4": quantize_int4}.get(kind)
        if fn is None:
            raise ValueError(f"unknown quantization {kind!r} (int8 or int4)")
        for graph, src in paths.items():
            dst = src.with_suffix(f".{kind}.onnx")
            fn(src, dst)
            files[graph][kind] = dst.name
    np.save(out / hyflash_card.DRAFT_VOCAB, model.draft_ids.cpu().numpy().astype(np.int64))
    ident = target.to_dict() if isinstance(target, TargetIdentity) else dict(target)
    if ident.get("vocab_size") != cfg.vocab_size or ident.get("hidden_size") != cfg.hidden_size:
        raise ValueError("the target identity does not match the model's config")
    import onnxruntime

    card = {
        "format": hyflash_card.CARD_FORMAT,
        "format_version": hyflash_card.CARD_VERSION,
        "name": name,
        "variant": cfg.variant,
        "target": ident,
        "config": cfg.to_dict(),
        "block_size_trained": cfg.block_size,
        # the propose graph runs S + 1 rows for S drafts (format 3; older cards: the whole block)
        "short_blocks": cfg.short_blocks,
        "data": data,
        "metrics": metrics or {},
        "files": files,
        "default_weights": default_weights or ("int8" if "int8" in files["propose"] else "fp32"),
        "io": graph_io(cfg),
        "trainable_parameters": model.num_trainable(),
        "draft_memory_bytes": {str(n): draft_memory_bytes(cfg, n) for n in (1024, 8192, 32768)},
        "exported": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
    }
    (out / hyflash_card.CARD).write_text(json.dumps(card, indent=2), encoding="utf-8")
    return out
