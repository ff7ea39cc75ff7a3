"""Drafters: anything that proposes tokens for the target to verify. none, n-gram (and its index
over committed tokens), hybrid, HyFlash's run time (onnxruntime) and its drafter folder's card,
drafter specs as settings name them, and the drafters installed for a person's own GGUFs.

Never imports llama_cpp, torch, PySide6 or fastapi, nor engine.engine or any room above it.
"""

from engine.drafters.ngram import NgramDrafter
from engine.drafters.none import NoDrafter

DRAFTER_CHOICES = ("none", "ngram", "hyflash")  # the built-in drafters, simplest first

__all__ = ["DRAFTER_CHOICES", "NgramDrafter", "NoDrafter"]
