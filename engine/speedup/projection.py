"""What a `hyflash speedup` job would take on a machine we do not have (a CUDA GPU, Apple
silicon), from a device profile (docs/bench/curves/projection-*.json) instead of a
calibration: a PROJECTION, never a measurement. The profile's published per-token rates (each
with its source) and stated assumptions become a calibration-shaped dict for this model, and
plan.choose_sources / stage_seconds turn it into per-stage times as they do for a
measured calibration (calibrate.py).

Scaling from the profile's reference model to this one:
  decode (greedy steps)   memory-bound: weight bytes read per token (GGUF file size), no
                          faster than the profile's per-step floor; 8 streams cost the
                          profile's T(8)/T(1) of one
  prefill / features      compute-bound: ~2 x parameters FLOPs per token, capped
  training step           the drafter's FLOPs per step (drafter_step_flops) at the profile's
                          prefill FLOP rate times an assumed utilisation, no faster than a floor
Only the llama.cpp side is projected (the torch side's load and batched steps are not), so
choose_sources picks llama.cpp for answers and features.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.drafters.hyflash_card import DrafterConfig
from engine.speedup.calibrate import FEATURE_TOKENS, LONG, SHORT, TRAIN_SEQ, TRAIN_STEPS
from engine.speedup.plan import (
    BUDGETS,
    STAGES,
    Corpus,
    ModelShape,
    SpeedupError,
    choose_sources,
    draft_vocab_size,
    stage_seconds,
)
from engine.training.train_config import TrainConfig

LABEL = "projection"
# the profile's numbers; each is {"value": > 0, and "source" or "assumption": why}
PROFILE_KEYS = (
    "decode_ref_bytes",  # the reference model's weight bytes read per decoded token
    "decode_ref_tok_s",  # its single-stream decode rate there
    "prefill_ref_params",
    "prefill_ref_tok_s",
    "batch8_step_ratio",  # T(8)/T(1): a step of 8 streams against one
    "decode_floor_s",  # the least time a decode step takes (launches, logits back, argmax)
    "prefill_cap_tok_s",  # the most tokens/s prefill reaches on a small model
    "train_utilisation",  # the drafter step's share of the prefill FLOP rate
    "train_step_floor_s",
    "train_setup_s",
    "calibration_fixed_s",  # model loads and start-up in the plan stage
)


def _bad(path: Path, why: str) -> SpeedupError:
    return SpeedupError("bad_profile", f"{path}: not a device profile ({why})")


def load_profile(path: Path) -> dict:
    """The profile's device name and values (SpeedupError("bad_profile") for a file that is
    not one: unreadable, a missing or non-positive value, a value with neither a source nor
    an assumption)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _bad(path, f"unreadable: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("device"), str):
        raise _bad(path, "no 'device' name")
    values, assumed = {}, []
    for key in PROFILE_KEYS:
        entry = raw.get(key)
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise _bad(path, f"'{key}' needs a positive 'value'")
        if not entry.get("source") and not entry.get("assumption"):
            raise _bad(path, f"'{key}' has neither a 'source' nor an 'assumption'")
        values[key] = float(value)
        if entry.get("assumption"):
            assumed.append(key)
    return {"device": raw["device"], "values": values, "assumed": assumed}


def drafter_step_flops(shape: ModelShape, tcfg: TrainConfig | None = None) -> float:
    """FLOPs of one training step of the recipe's drafter (calibrate._training's: block 16,
    causal slots, copy path, Mamba-2 memory) on sequences of calibrate.TRAIN_SEQ tokens.
    Trainable matmuls count 6 FLOPs a weight a row (forward, input and weight gradients);
    the frozen LM head over the draft vocabulary 4 (no weight gradient). Context rows (every
    position: feature and token projections, the layers' context K/V) and slot rows
    (anchors x block) are counted; attention over the 64-entry window and the scan itself
    are left out (small beside these at d=384)."""
    tcfg = tcfg or TrainConfig()
    cfg = DrafterConfig(hidden_size=shape.hidden_size, feature_dim=shape.hidden_size)
    d, e, hidden = cfg.d_model, shape.hidden_size, cfg.ffn_mult * cfg.d_model
    memory = d * cfg.mem_heads * (cfg.mem_key_dim + cfg.mem_value_dim)  # mem_q + mem_o
    layer = 4 * d * d + memory + 3 * d * hidden  # q, k, v, o; ffn_in (2 x hidden), ffn_out
    # slots: anchor_in, cand_in, the layers, out_proj, ptr_q, gate
    per_slot = 2 * e * d + cfg.n_layers * layer + d * e + d * cfg.ptr_dim + 3 * d
    # context: ctx_feat, ctx_tok, the memory's input projection, ptr_k, the layers' ctx_k/v
    scan_in = d * cfg.mem_heads * (cfg.mem_key_dim + cfg.mem_value_dim + 2)
    per_context = 2 * e * d + scan_in + d * cfg.ptr_dim + cfg.n_layers * 2 * d * d
    head = e * draft_vocab_size(shape.vocab_size)
    slots = tcfg.batch_seqs * tcfg.anchors_per_seq * 16
    contexts = tcfg.batch_seqs * TRAIN_SEQ
    return 6.0 * (slots * per_slot + contexts * per_context) + 4.0 * slots * head


def project_calibration(profile: dict, shape: ModelShape) -> dict:
    """A calibration-shaped dict (calibrate.calibrate's keys llama, llama1, train, seconds)
    for this model on the profile's device."""
    v = profile["values"]
    bytes_per_s = v["decode_ref_bytes"] * v["decode_ref_tok_s"]
    flops_per_s = 2.0 * v["prefill_ref_params"] * v["prefill_ref_tok_s"]
    one = max(shape.file_bytes / bytes_per_s, v["decode_floor_s"])
    prefill = min(flops_per_s / (2.0 * shape.n_params), v["prefill_cap_tok_s"])
    train_step = max(
        drafter_step_flops(shape) / (flops_per_s * v["train_utilisation"]),
        v["train_step_floor_s"],
    )
    rates = {"prefill_tok_s": prefill, "features_tok_s": prefill}
    llama = rates | {"step_s": max(one * v["batch8_step_ratio"], v["decode_floor_s"]), "streams": 8}
    llama1 = rates | {"step_s": one, "streams": 1}
    # what calibrate.calibrate runs: a prefill, three greedy runs per stream count, the
    # training steps, plus the loads
    work = (
        FEATURE_TOKENS / prefill
        + (2 * SHORT + LONG) * (llama["step_s"] + one)
        + v["train_setup_s"]
        + TRAIN_STEPS * train_step
    )
    return {
        "llama": llama,
        "llama1": llama1,
        "train": {"setup_s": v["train_setup_s"], "step_s": train_step},
        "seconds": v["calibration_fixed_s"] + work,
    }


def project(shape: ModelShape, budget_name: str, profile: dict) -> dict:
    """Per-stage seconds and the total of a fresh job (no corpus) on the profile's device,
    labelled a projection, with the rates it came from and which inputs are assumptions."""
    budget = BUDGETS[budget_name]
    calib = project_calibration(profile, shape)
    v = profile["values"]
    # the assumed limits that set a rate instead of the published measurement's scaling
    bound = {
        "decode_floor_s": calib["llama1"]["step_s"] == v["decode_floor_s"],
        "prefill_cap_tok_s": calib["llama"]["prefill_tok_s"] == v["prefill_cap_tok_s"],
        "train_step_floor_s": calib["train"]["step_s"] == v["train_step_floor_s"],
    }
    have = Corpus()
    choice = choose_sources(budget, have, calib)
    eta = stage_seconds(budget, have, calib, choice)
    return {
        "label": LABEL,
        "device": profile["device"],
        "budget": budget.name,
        "architecture": shape.architecture,
        "stages": [{"name": s, "eta_s": eta[s]} for s in STAGES],
        "eta_s": sum(eta.values()),
        "generator": choice["generator"],
        "feature_source": choice["features"],
        "rates": calib,
        "train_step_flops": drafter_step_flops(shape),
        "assumed_inputs": profile["assumed"],
        "set_by_assumed_limit": [k for k, hit in bound.items() if hit],
    }


def _print(result: dict, model_id: str, profile_path: str) -> None:
    from engine.speedup.report import duration

    print(
        f"PROJECTION (not measured): {model_id}, budget {result['budget']}, on "
        f"{result['device']}\nfrom {profile_path}; assumed, not measured there: "
        f"{', '.join(result['assumed_inputs']) or 'nothing'}; rates set by an assumed "
        f"limit: {', '.join(result['set_by_assumed_limit']) or 'none'}"
    )
    for s in result["stages"]:
        print(f"  {s['name']:<9} {duration(s['eta_s'])}")
    print(f"  {'total':<9} {duration(result['eta_s'])} (projection)")


def cmd_project(args) -> int:
    """`hyflash speedup --project PROFILE`: the plan's stages and total on the profile's
    device, printed (or one JSON object with --json); nothing is run or measured."""
    from engine.bench.provenance import git_state
    from engine.models.resolve import resolve_target
    from engine.speedup.plan import check_architecture, inspect_gguf

    try:
        model_id, gguf = resolve_target(args.model)
        shape = inspect_gguf(gguf)
        check_architecture(shape, gguf)
        result = project(shape, args.budget, load_profile(Path(args.project)))
    except SpeedupError as exc:
        error = {"label": LABEL, "error": str(exc), "kind": exc.kind}
        print(json.dumps(error) if args.json else f"error: {exc}")
        return 2
    made = {"model": model_id, "gguf": str(gguf), "profile": args.project, "git": git_state()}
    result = made | result
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result, model_id, args.project)
    return 0
