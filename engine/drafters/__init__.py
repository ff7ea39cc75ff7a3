"""Drafters: anything that proposes tokens for the target to verify."""

from engine.drafters.base import Draft, Drafter
from engine.drafters.ngram import NgramDrafter
from engine.drafters.none import NoDrafter

DRAFTER_CHOICES = ("none", "ngram", "hyflash")  # the built-in drafters, simplest first

__all__ = ["DRAFTER_CHOICES", "Draft", "Drafter", "NgramDrafter", "NoDrafter"]
