"""A tiny drafter configuration and model shared by the HyFlash model, training and run-time
tests."""

from __future__ import annotations

import pytest
import torch

from engine.drafters.hyflash_card import DrafterConfig
from engine.training.model import HyFlashModel

V, E = 97, 16  # tiny target: vocabulary, hidden size


def tiny_config(**kw) -> DrafterConfig:
    base = dict(
        hidden_size=E,
        feature_dim=E,
        vocab_size=V,
        d_model=32,
        n_layers=2,
        n_heads=4,
        window=8,
        block_size=4,
        mem_heads=2,
        mem_key_dim=8,
        mem_value_dim=8,
        draft_vocab_size=64,
        ptr_dim=8,
        scan_chunk=8,
        observe_chunk=8,
    )
    base.update(kw)
    return DrafterConfig(**base)


def tiny_model(cfg: DrafterConfig, seed: int = 0) -> HyFlashModel:
    """A drafter over a random tiny target whose embedding is its LM head (tied)."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(V, E, generator=g)
    draft_ids = torch.randperm(V, generator=g)[: cfg.n_draft_vocab]
    torch.manual_seed(seed)
    return HyFlashModel(cfg, emb, emb, draft_ids).eval()


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny ops on a shared 2-core machine: extra OpenMP threads only spin and wait."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
