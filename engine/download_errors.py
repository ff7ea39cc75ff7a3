"""What can go wrong with a Hub download, in words a person can act on: the error classes
download_model raises, and huggingface_hub / httpx errors turned into one of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.events import ModelLoadError

if TYPE_CHECKING:
    from engine.downloads import HubSource


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


def hub_error(exc: Exception, src: HubSource, endpoint: str) -> DownloadError:
    """Turn huggingface_hub / httpx errors into one clear, user-facing message."""
    import httpx2
    from huggingface_hub import errors as hf

    where = f"{src.repo}/{src.file} (revision {src.revision})"
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return OfflineError(f"Offline mode is on (HF_HUB_OFFLINE=1); cannot download {where}.")
    if isinstance(exc, hf.GatedRepoError):
        return DownloadError(
            f"{src.repo} is gated: accept its license on the Hub and log in (hf auth login)."
        )
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401:
        return DownloadError(
            f"The Hub needs a login for {where} (private or gated repo): run hf auth login."
        )
    missing = (hf.RemoteEntryNotFoundError, hf.RevisionNotFoundError, hf.RepositoryNotFoundError)
    if isinstance(exc, missing) or status == 404:
        return HubNotFoundError(
            f"Not found on the Hub (HTTP {status or 404}): {where}. The catalog entry may be "
            "out of date."
        )
    if isinstance(exc, hf.HfHubHTTPError):
        return DownloadError(f"The Hub refused the download of {where}: HTTP {status}: {exc}")
    if isinstance(exc, httpx2.TransportError):
        return DownloadError(
            f"Could not reach the Hub at {endpoint} to download {where}: "
            f"{type(exc).__name__}: {exc}. Check the internet connection and try again."
        )
    return DownloadError(f"Download of {where} failed: {type(exc).__name__}: {exc}")
