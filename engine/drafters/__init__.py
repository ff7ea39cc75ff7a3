"""Drafters: anything that proposes tokens for the target to verify."""

from engine.drafters.base import Draft, Drafter
from engine.drafters.ngram import NgramDrafter
from engine.drafters.none import NoDrafter

__all__ = ["Draft", "Drafter", "NgramDrafter", "NoDrafter"]
