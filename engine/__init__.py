"""HyFlash Chat engine: a llama.cpp target, speculative drafters and the lossless draft ->
verify -> accept loop. Imports neither Qt nor torch (training alone needs torch).

Rooms, lowest first; a room imports only from rooms below it (tests/test_rooms.py):
  options, events, units, atomic_files, paths, file_hash
             the ground floor: the options table, the event and error types, sizes, atomic
             files, every path the project keeps files under, a file's sha256 read once
  decoding/  the loop, block size, sampling, the Target and Drafter protocols
  llama/     the llama.cpp target, the kernel check, backends and machine probe, chat
             template, GGUF files read without llama.cpp
  models/    the catalog, resolving a model id or path, PyPI parts, Hub downloads, the
             GGUF files already on this computer
  drafters/  none, n-gram, hybrid, HyFlash's run time and card, drafter specs, installed ones
  engine.py  Engine: one loaded target and drafter behind a generator of events
  server/    the OpenAI-compatible HTTP server in front of one Engine
  bench/     speed and drafter-time benchmarks, prompt sets and corpora, provenance
  training/  the HyFlash drafter's torch side: data, features, model, training, export, walks
  speedup/   the job that makes a drafter for any GGUF: plan, calibration, stages, report
  commands/  every `hyflash` subcommand (engine.commands.cli is the entry point)
"""

__version__ = "0.1.0"
