"""HyFlash Chat engine: llama.cpp target + speculative drafters. Imports neither Qt nor torch."""

__version__ = "0.1.0"
