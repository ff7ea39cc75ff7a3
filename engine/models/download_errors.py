"""What can go wrong with a Hub download: the error classes download_model raises (their
messages say what to do; downloads.hub_error words huggingface_hub / httpx errors as one)."""

from __future__ import annotations

from engine.events import ModelLoadError


class DownloadError(ModelLoadError):
    """A download failed; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    pass


class ChecksumError(DownloadError):
    pass


class DiskFullError(DownloadError):
    pass


class HubNotFoundError(DownloadError):
    pass


class OfflineError(DownloadError):
    pass
