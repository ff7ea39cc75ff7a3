"""The draft -> verify -> accept loop and what it needs: the block-size chooser and cost model,
sampling and acceptance, and the Target and Drafter protocols the loop talks to.

Imports numpy, engine.events and engine.options only. Never imports llama_cpp, gguf,
onnxruntime, torch, PySide6 or fastapi, nor any other room: the loop runs and is tested
against any target and drafter.
"""
