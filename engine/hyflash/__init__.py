"""HyFlash drafter, torch side ([train] extra): model, recurrent memories, training, export.

Modules (import them directly; this package itself imports nothing). What training shares
with the run time (DrafterConfig, card format, target identity, embedding rows, n-gram
candidates) is engine/drafters/hyflash_shared.py, which these modules import, never the
other way round:
  gguf_weights  the target's frozen embedding / LM head as whole matrices, from its GGUF
  ssm           Mamba-2 and Gated DeltaNet memories: step recurrence + chunked scan (torch)
  model         HyFlashModel: training forward, copy path, mixture over target ids (torch)
  train         the training loop, draft-vocabulary selection (torch)
  export        export_drafter(): ONNX graphs + INT8/INT4 + card.json (torch, onnx)
The run-time drafter that consumes the exported folder is engine.drafters.hyflash.
"""
