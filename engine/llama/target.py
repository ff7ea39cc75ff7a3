"""LlamaTarget: the quantized target model, driven through llama-cpp-python's low-level API.

One `decode` of a batch returns the logits of every position and, when features are on, the
final normed hidden state per position (embeddings on, pooling NONE), from the same forward
pass. The KV cache holds exactly `self.tokens` at positions 0..len-1 of sequence 0: prefix
reuse keeps the common prefix between turns, `truncate` rolls back rejected positions.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from engine.decoding.target_protocol import DecodeOutput
from engine.events import (
    DEFAULT_N_CTX,
    ContextOverflowError,
    EngineError,
    ModelFileError,
    ModelLoadError,
)
from engine.llama.gguf_file import check_gguf, check_gguf_data
from engine.llama.kernels import KernelConfig, KernelVerdict, decide
from engine.llama.machine_probe import usable_cores

_GGML_TYPE_SIZE = {1: 2.0, 0: 4.0, 8: 34 / 32}  # f16, f32, q8_0 bytes per element (KV types)
_LOG_LINES: deque[str] = deque(maxlen=400)
_GGML_LOG_DEBUG = 1
_GGML_TYPE_Q8_0 = 8
_LOG_LOCK = threading.Lock()


@llama_cpp.llama_log_callback
def _log_to_buffer(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp is chatty on stderr; keep its log (debug lines dropped) for error messages.
    if level == _GGML_LOG_DEBUG:
        return
    with _LOG_LOCK:
        _LOG_LINES.append(text.decode("utf-8", errors="replace"))


def _install_logger() -> None:
    if os.environ.get("HYFLASH_LLAMA_LOG") != "stderr":
        llama_cpp.llama_log_set(_log_to_buffer, ctypes.c_void_p(0))


def recent_llama_log(n: int = 20) -> str:
    with _LOG_LOCK:
        return "".join(list(_LOG_LINES)[-n:])


def _load_error(log: str) -> str:
    """llama.cpp's reason for refusing a model file, from its log, in one line."""
    marker = "error loading model: "
    reasons = [line.split(marker, 1)[1] for line in log.splitlines() if marker in line]
    return " ".join(reasons[-1].split()) if reasons else "no reason given"


_install_logger()
llama_cpp.llama_backend_init()


def capture_layer_functions():
    """libllama exports the per-layer input capture only as C++ symbols (not in llama.h)."""
    lib = llama_cpp.llama_cpp._lib
    try:
        set_fn = lib._Z30llama_set_embeddings_layer_inpP13llama_contextjb
        get_fn = lib._Z30llama_get_embeddings_layer_inpP13llama_contextj
    except AttributeError:
        return None
    set_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
    set_fn.restype = None
    get_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    get_fn.restype = ctypes.POINTER(ctypes.c_float)
    return set_fn, get_fn


def default_threads() -> int:
    # Physical cores are what matter for a compute-bound decode; this counts logical ones (SMT).
    return max(1, min(usable_cores(), 8))


class LlamaTarget:
    """The engine's Target (engine.decoding.target_protocol): a GGUF model run by llama.cpp."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        n_batch: int = 512,
        n_gpu_layers: int = 0,
        capture_layers: Sequence[int] = (),
        features: bool = False,
        kernels: KernelConfig | KernelVerdict | None = None,
    ) -> None:
        """kernels: the configuration to load with; None decides it (engine.llama.kernels: a check
        in a child process the first time a model is used on this machine, then cached)."""
        path = Path(model_path)
        check_gguf(path)
        self.path = path
        self.n_threads = n_threads or default_threads()
        self.n_gpu_layers = n_gpu_layers
        self._model = None
        self._ctx = None
        self._batch = None
        if kernels is None:
            kernels = decide(path, n_threads=self.n_threads, n_gpu_layers=n_gpu_layers)
        # the verdict (how exact batched rows are) when known; a bare config carries none
        self.kernel_verdict = kernels if isinstance(kernels, KernelVerdict) else None
        self.kernels = kernels.config if isinstance(kernels, KernelVerdict) else kernels
        self._load_model(n_gpu_layers)
        self._create_context(n_ctx, n_batch, features)
        self._enable_layer_capture(capture_layers)

        # Tokens whose K/V are in the cache, at positions 0..len-1; features stored per position
        # (valid below self._features_upto) so a drafter can be refed without re-decoding.
        self.tokens: list[int] = []
        self.feature_layers: tuple[int, ...] = ()
        self._features = np.zeros((self.n_ctx, self.n_embd), dtype=np.float32)
        self._features_upto = 0

    def _load_model(self, n_gpu_layers: int) -> None:
        path = self.path
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        mparams.use_extra_bufts = self.kernels.extra_bufts
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), mparams)
        if not model:
            check_gguf_data(path)  # names a damaged file as such
            raise ModelFileError(
                f"llama.cpp could not load {path.name}: the file is damaged or of an unsupported "
                f"architecture ({_load_error(recent_llama_log(8))})"
            )
        self._model = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_embd = llama_cpp.llama_model_n_embd(model)
        self.n_layer = llama_cpp.llama_model_n_layer(model)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(model)

    def _create_context(self, n_ctx: int, n_batch: int, features: bool) -> None:
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.embeddings = features
        cparams.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
        # Exactness: with an f16/f32 KV cache, llama.cpp's CPU flash attention takes a
        # different kernel for a 1-token decode once 512+ cells are attended (KV split across
        # threads) and for 32+ query rows (tiled), so the rows of a B-token verify stop being
        # bit-identical to 1-token decodes and greedy speculative output can drift from plain
        # decoding in near-ties (seen at ~750 tokens). A q8_0 cache takes one per-row kernel
        # for every batch shape (and halves KV memory); quantized V needs flash attention on.
        cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.type_k = _GGML_TYPE_Q8_0
        cparams.type_v = _GGML_TYPE_Q8_0
        ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not ctx:
            self.close()
            raise ModelLoadError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {self.path.name} "
                f"(out of memory?).\n{recent_llama_log(4).strip()}"
            )
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.n_batch = n_batch
        self._features_on = features
        self._type_k = cparams.type_k
        self._type_v = cparams.type_v
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)

    def _enable_layer_capture(self, capture_layers: Sequence[int]) -> None:
        """Ask llama.cpp to keep these layers' inputs (training features), or fail clearly."""
        self.capture_layers = tuple(capture_layers)
        self._layer_fns = None
        try:
            self._capture(self.capture_layers, True)
        except EngineError:
            self.close()
            raise

    def _capture(self, layers: Sequence[int], on: bool) -> None:
        if not layers:
            return
        if self._layer_fns is None:
            self._layer_fns = capture_layer_functions()
            if self._layer_fns is None:
                raise EngineError("this libllama build cannot capture intermediate layers")
        for layer in layers:
            if not 0 <= layer < self.n_layer:
                raise EngineError(f"layer {layer} out of range 0..{self.n_layer - 1}")
        if on and not self.can_capture_layers(layers):
            raise EngineError(
                f"this llama.cpp build cannot read the layer inputs of a {self.architecture} "
                f"model (layers {list(layers)}); only the final state is available"
            )
        for layer in layers:
            self._layer_fns[0](self._ctx, layer, on)

    def can_capture_layers(self, layers: Sequence[int]) -> bool:
        """Whether capturing these layers' inputs works on this model (checked in a child
        once: where it does not, llama.cpp aborts the process instead of failing)."""
        from engine.llama.layer_capture import layer_capture_works

        if capture_layer_functions() is None:
            return False
        return layer_capture_works(self.path, layers, extra_bufts=self.kernels.extra_bufts)

    def set_capture_unchecked(self, layers: Sequence[int]) -> None:
        """Capture these layers' inputs without asking whether this model allows it: only
        for the child engine.llama.layer_capture runs, which may abort."""
        self._layer_fns = self._layer_fns or capture_layer_functions()
        for layer in layers:
            self._layer_fns[0](self._ctx, int(layer), True)

    def _layer_rows(self, layer: int, n: int) -> np.ndarray:
        ptr = self._layer_fns[1](self._ctx, layer)
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_embd))

    # ----- metadata -------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        return buf.value.decode("utf-8", errors="replace")

    @property
    def architecture(self) -> str:
        return self.meta("general.architecture") or "unknown"

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    @property
    def model(self):
        """The llama.cpp model handle, for another context on the same weights (the
        distillation's batched decoder)."""
        return self._model

    def model_size_bytes(self) -> int:
        return int(llama_cpp.llama_model_size(self._model))

    # ----- tokens ---------------------------------------------------------------------------

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), buf, cap, add_special, parse_special
        )
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buf, cap, add_special, parse_special
            )
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        data = b"".join(self.token_bytes(t, special=special) for t in tokens)
        return data.decode("utf-8", errors="replace")

    def is_control_token(self, text: str) -> bool:
        """Whether the vocabulary holds text as one special token (a chat turn marker), not
        as ordinary text."""
        as_special = self.tokenize(text, add_special=False, parse_special=True)
        return len(as_special) == 1 and as_special != self.tokenize(
            text, add_special=False, parse_special=False
        )

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    @property
    def bos_token(self) -> int:
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def eos_token(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    def adds_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    # ----- decoding -------------------------------------------------------------------------

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def features_on(self) -> bool:
        return self._features_on

    def set_features(self, on: bool, layers: Sequence[int] = ()) -> None:
        """Turn hidden-state output on or off (off makes long prefills cheaper: with features
        on, llama.cpp outputs every row, logits included).

        layers (with on): target layers whose inputs a drafter reads beside the final state
        (fused features, as EAGLE-3 and DFlash feed): each position's features are then those
        layers' inputs in order followed by the final normed state, (len(layers) + 1) * n_embd
        wide. Changing them forgets the stored features."""
        if on != self._features_on:
            llama_cpp.llama_set_embeddings(self._ctx, on)
            self._features_on = on
        layers = tuple(int(x) for x in layers)
        if on and layers != self.feature_layers:
            self._capture(layers, True)
            dropped = set(self.feature_layers) - set(layers) - set(self.capture_layers)
            self._capture(sorted(dropped), False)
            self.feature_layers = layers
            width = (len(layers) + 1) * self.n_embd
            self._features = np.zeros((self.n_ctx, width), dtype=np.float32)
            self._features_upto = 0

    def decode(self, tokens: Sequence[int], *, all_logits: bool = True) -> DecodeOutput:
        """Decode `tokens` at positions n_past.. and keep them in the cache.

        all_logits=False asks for the last row only (prefill); with features on llama.cpp
        outputs every row anyway."""
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if n > self.n_batch:
            raise ValueError(f"batch of {n} exceeds n_batch {self.n_batch}")
        if self.n_past + n > self.n_ctx:
            raise ContextOverflowError(
                f"the context is full ({self.n_past} + {n} tokens > {self.n_ctx})"
            )
        batch = self._batch
        start = self.n_past
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = all_logits or i == n - 1
        batch.n_tokens = n
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc != 0:
            raise EngineError(f"llama_decode failed with code {rc}. {recent_llama_log(3).strip()}")
        n_out = n if (all_logits or self._features_on) else 1
        logits_ptr = llama_cpp.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(logits_ptr, shape=(n_out, self.n_vocab))
        logits = (rows if all_logits else rows[-1:]).copy()
        features = None
        if self._features_on:
            emb_ptr = llama_cpp.llama_get_embeddings(self._ctx)
            final = np.ctypeslib.as_array(emb_ptr, shape=(n, self.n_embd))
            parts = [self._layer_rows(layer, n) for layer in self.feature_layers]
            features = np.concatenate([*parts, final], axis=1) if parts else final.copy()
            if self._features_upto == start:
                self._features[start : start + n] = features
                self._features_upto = start + n
        layers = {layer: self._layer_rows(layer, n).copy() for layer in self.capture_layers}
        self.tokens.extend(int(t) for t in tokens)
        return DecodeOutput(logits=logits, features=features, layers=layers)

    def prefill(
        self, tokens: Sequence[int], cancel: threading.Event | None = None
    ) -> np.ndarray | None:
        """Decode tokens in n_batch chunks; return the last row's logits (None if no tokens)."""
        last = None
        for i in range(0, len(tokens), self.n_batch):
            if cancel is not None and cancel.is_set():
                return None
            out = self.decode(tokens[i : i + self.n_batch], all_logits=False)
            last = out.logits[-1]
        return last

    def truncate(self, n_keep: int) -> None:
        """Roll back: drop cached positions n_keep.. (rejected draft tokens, an old suffix)."""
        if n_keep >= self.n_past:
            return
        ok = llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1)
        if not ok:
            raise EngineError("llama.cpp could not remove positions from the KV cache")
        del self.tokens[n_keep:]
        self._features_upto = min(self._features_upto, n_keep)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix of `tokens`, drop the rest; return its length."""
        common = 0
        for cached, new in zip(self.tokens, tokens, strict=False):
            if cached != new:
                break
            common += 1
        self.truncate(common)
        return common

    def features(self, start: int, stop: int) -> np.ndarray | None:
        """Stored features of cached positions start..stop-1, or None where not all are known."""
        if stop > self._features_upto:
            return None
        return self._features[start:stop]

    def features_known_upto(self) -> int:
        return self._features_upto

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.tokens.clear()
        self._features_upto = 0

    # ----- memory accounting ----------------------------------------------------------------

    def kv_bytes_per_token(self) -> int:
        """K and V bytes one cached token takes across all layers, at the cache's types (q8_0:
        see _create_context)."""
        n_head = llama_cpp.llama_model_n_head(self._model)
        n_head_kv = llama_cpp.llama_model_n_head_kv(self._model)
        arch = self.architecture
        head_k = int(self.meta(f"{arch}.attention.key_length") or self.n_embd // n_head)
        head_v = int(self.meta(f"{arch}.attention.value_length") or self.n_embd // n_head)
        k = head_k * n_head_kv * _GGML_TYPE_SIZE[self._type_k]
        v = head_v * n_head_kv * _GGML_TYPE_SIZE[self._type_v]
        return int(round(self.n_layer * (k + v)))

    def kv_bytes_allocated(self) -> int:
        return self.kv_bytes_per_token() * self.n_ctx

    def kv_bytes_used(self) -> int:
        return self.kv_bytes_per_token() * self.n_past

    # ----- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LlamaTarget:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
