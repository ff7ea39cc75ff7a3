"""HyFlash drafter, torch side ([train] extra): model, recurrent memories, export.

Modules (import them directly; this package itself imports nothing, so the torch-free ones,
config and gguf_weights, stay usable from the run time):
  config        DrafterConfig (every knob, JSON round-trip), draft_memory_bytes()
  gguf_weights  the target's frozen embedding / LM head from its GGUF, target identity
  ssm           Mamba-2 and Gated DeltaNet memories: step recurrence + chunked scan (torch)
  model         HyFlashModel: training forward, copy path, mixture over target ids (torch)
  export        export_drafter(): ONNX graphs + INT8/INT4 + card.json (torch, onnx)
The run-time drafter that consumes the exported folder is engine.drafters.hyflash.
"""
