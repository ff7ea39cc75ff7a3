"""llama.cpp and the machine it runs on: the target (LlamaTarget), the kernel check that makes
batched verification exact and its verdict cache, backends (CPU, CUDA, Metal, QNN) and the
machine probe, the model's chat template, and GGUF files read without llama.cpp (header,
tensor rows, the checks that name a damaged file).

Never imports torch, PySide6 or fastapi, nor models, drafters or any room above them.
"""
