"""The HyFlash drafter, torch side ([train] extra): self-distilled data, target features,
the model and its recurrent memories, training, export to ONNX, and the acceptance walk.

Import modules directly (this package itself imports nothing). What training shares with the
run time (DrafterConfig, the card, the target identity, embedding rows, n-gram candidates) lives
below, in engine.drafters.hyflash_card, engine.drafters.ngram_index and engine.llama.gguf_file:
the run time never imports this room. torch loads in the modules that need it; the rest
(selection, train_config, data_run, train_run, acceptance, ...) import without it.

Never imports PySide6 or fastapi, nor speedup, server or commands.
"""
