"""TorchTarget: the target's GGUF loaded by transformers (the [train] extra), for training data.

The run-time target stays llama.cpp (engine.llama.target.LlamaTarget); this is a second, faithful
forward of the same weights (dequantized to fp32 or bf16) that can be faster for the
training side: features and labels of many sequences at once, and batched greedy answers,
on CPU or CUDA. What it gives mirrors LlamaTarget's:

- features: the final hidden state after the model's final RMSNorm, per position
  (HF `LlamaModel(...).last_hidden_state`), which is what llama.cpp's embeddings output
  with pooling NONE is;
- layers: the input of decoder layer i (the residual stream before it; i = 0 is the token
  embedding), as LlamaTarget's capture_layers;
- next_tokens: argmax of the logits at every position (the prediction of the next token).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.bench.corpora import Prompt

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_LM_HEAD_ROWS = 512  # positions per LM-head matmul: full logits of a batch would be GBs


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def native_bf16(device: str) -> bool:
    """Whether bf16 matmuls run natively: CUDA with bf16, or a CPU with AMX or AVX512-BF16
    (elsewhere torch emulates bf16 and fp32 is faster)."""
    if resolve_device(device) == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()


def resolve_dtype(dtype: str, device: str = "auto") -> str:
    """ "auto" -> "bf16" where it is native (see native_bf16), else "fp32"."""
    if dtype == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (auto, fp32 or bf16)")
    return dtype


@dataclass
class TorchOutput:
    features: np.ndarray  # (n, n_embd) float32, after the final norm
    next_tokens: np.ndarray | None  # (n,) int64, argmax of the logits at each position
    layers: dict[int, np.ndarray] = field(default_factory=dict)  # layer id -> (n, n_embd)


class TorchTarget:
    def __init__(
        self,
        gguf_path: str | Path,
        *,
        dtype: str = "auto",
        device: str = "auto",
        threads: int | None = None,
        capture_layers: Sequence[int] = (),
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        path = Path(gguf_path)
        self.path = path
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        if threads:
            torch.set_num_threads(threads)
        # transformers reads the tokenizer and the weights from the GGUF itself. Dequantized:
        # packed GGUF matmuls would need hub-fetched `kernels` and compute in fp32 anyway.
        self.tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent),
            gguf_file=path.name,
            dtype=DTYPES[self.dtype],
            quantization_config=GgufConfig(gguf_file=path.name, dequantize=True),
        )
        self.model = model.to(self.device).eval()
        self.n_layer = model.config.num_hidden_layers
        self.n_embd = model.config.hidden_size
        self.n_vocab = model.config.vocab_size
        self.capture_layers = tuple(capture_layers)
        for layer in self.capture_layers:
            if not 0 <= layer < self.n_layer:
                raise ValueError(f"layer {layer} out of range 0..{self.n_layer - 1}")
        self._captured: dict[int, torch.Tensor] = {}
        self._hooks = [
            self.model.model.layers[layer].register_forward_pre_hook(self._capture_hook(layer))
            for layer in self.capture_layers
        ]

    def _capture_hook(self, layer: int):
        def hook(module, args):  # the decoder layer's input: its hidden states come first
            self._captured[layer] = args[0]

        return hook

    def tokenize(self, text: str) -> list[int]:
        """Token ids of text; special tokens written in it (chat markers) are parsed, no BOS
        is added (as LlamaTarget.tokenize(text, add_special=False))."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _padded(self, seqs: Sequence[Sequence[int]], left: bool) -> tuple[torch.Tensor, ...]:
        width = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), width, dtype=torch.int64)
        mask = torch.zeros(len(seqs), width, dtype=torch.int64)
        for row, seq in enumerate(seqs):
            cols = slice(width - len(seq), width) if left else slice(0, len(seq))
            ids[row, cols] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
            mask[row, cols] = 1
        # positions count real tokens only, so a left-padded row sees the same rotary angles
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), pos.to(self.device)

    @torch.inference_mode()
    def forward(
        self, seqs: Sequence[Sequence[int]], *, next_tokens: bool = True
    ) -> list[TorchOutput]:
        """One padded forward of a batch of token sequences (each from position 0); per
        sequence its features, captured layers and (next_tokens) the argmax predictions."""
        ids, mask, pos = self._padded(seqs, left=False)
        self._captured.clear()
        hidden = self.model.model(input_ids=ids, attention_mask=mask, position_ids=pos)
        hidden = hidden.last_hidden_state
        outs = []
        for row, seq in enumerate(seqs):
            n = len(seq)
            feats = hidden[row, :n]
            preds = None
            if next_tokens:
                chunks = feats.split(_LM_HEAD_ROWS)
                preds = torch.cat([self.model.lm_head(c).argmax(-1) for c in chunks]).cpu().numpy()
            layers = {k: _numpy(v[row, :n]) for k, v in self._captured.items()}
            outs.append(TorchOutput(_numpy(feats), preds, layers))
        self._captured.clear()
        return outs

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts_ids: Sequence[Sequence[int]],
        max_new_tokens: int,
        eos_ids: Sequence[int],
    ) -> list[tuple[list[int], str]]:
        """Greedy answers to a batch of prompts (left-padded, one KV cache): per prompt
        (answer ids, stop reason), "eos" (the end token not included) or "length", as
        distill.py stores them. Callers append each batch's answers as it finishes, so a
        long run resumes from its output file."""
        from transformers import DynamicCache

        ids, mask, pos = self._padded(prompts_ids, left=True)
        eos = torch.as_tensor(list(eos_ids), device=self.device)
        cache = DynamicCache(config=self.model.config)
        answers: list[list[int]] = [[] for _ in prompts_ids]
        stops = ["length"] * len(prompts_ids)
        rows = list(range(len(prompts_ids)))  # the prompt each live batch row answers
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, logits_to_keep=1
        ).logits
        for step in range(max_new_tokens):
            token = logits[:, -1].argmax(-1)
            ended = torch.isin(token, eos)
            for row, t, end in zip(rows, token.tolist(), ended.tolist(), strict=True):
                if end:
                    stops[row] = "eos"
                else:
                    answers[row].append(t)
            if bool(ended.all()) or step + 1 == max_new_tokens:
                break
            if bool(ended.any()):  # finished rows leave the batch: later steps cost less
                keep = (~ended).nonzero().flatten()
                cache.batch_select_indices(keep)
                mask, pos, token = mask[keep], pos[keep], token[keep]
                rows = [rows[i] for i in keep.tolist()]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits = self.model(
                input_ids=token[:, None], attention_mask=mask, position_ids=pos, cache=cache
            ).logits
        return list(zip(answers, stops, strict=True))

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.float().cpu().numpy()


def generate_answers(
    target: TorchTarget,
    todo: Sequence[tuple[Prompt, list[int]]],
    out_path: Path,
    *,
    batch: int,
    max_tokens: int,
    eos_ids: Sequence[int],
    progress: Callable[[int, int, float], None] | None = None,
) -> int:
    """Append greedy answers to (prompt, prompt ids) pairs in distill.py's row format, one
    batch at a time (prompts of similar length together: less padding); rows name their
    generator. Callers leave out the keys out_path already holds, so a run resumes."""
    from engine.training.distill import append_rows

    order = sorted(todo, key=lambda item: len(item[1]))
    written = made = 0
    start = time.perf_counter()
    with append_rows(out_path) as f:
        for b in range(0, len(order), batch):
            chunk = order[b : b + batch]
            answers = target.generate_batch([ids for _, ids in chunk], max_tokens, eos_ids)
            for (prompt, ids), (answer, stop) in zip(chunk, answers, strict=True):
                row = {
                    "key": prompt.key,
                    "source": prompt.source,
                    "prompt_ids": list(ids),
                    "answer_ids": answer,
                    "stop": stop,
                    "generator": f"torch-{target.dtype}",
                }
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
                written += 1
                made += len(answer)
            f.flush()
            if progress:
                progress(written, len(order), made / (time.perf_counter() - start))
    return written
