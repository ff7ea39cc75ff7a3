"""Hub downloads of catalog models: resumable, verified, cancellable, honest about disk space.

huggingface_hub (2.x) does the Hub protocol: URL building, the metadata HEAD (commit, ETag,
size, CDN redirect), auth headers, offline mode and error classes. The byte transfer is our
own loop on huggingface_hub's HTTP session because `hf_hub_download` deletes its temporary file
when a transfer fails, so it cannot resume across runs, and it cancels only between 10 MB
chunks.

Cache layout (root: $HYFLASH_CACHE_DIR, else the platform user cache dir of "HyFlashChat"):

    models/<org>--<name>/<file>                 the verified model; used only with its manifest
    models/<org>--<name>/<file>.manifest.json   id, repo, revision, commit, sha256, size
    models/<org>--<name>/<file>.part            bytes so far: always a prefix of the remote file
    models/<org>--<name>/<file>.part.json       which remote version (ETag) the prefix belongs to
    models/<org>--<name>/<file>.lock            one downloader at a time

A model counts as installed only when file and manifest both exist; the manifest is written
before the verified file is renamed into place, so a crash never leaves an unverified file
that looks installed.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit

from engine.atomic_files import read_json, write_json
from engine.events import ModelLoadError
from engine.file_hash import still_verified
from engine.models.catalog import CatalogEntry
from engine.models.download_errors import (
    ChecksumError,
    DiskFullError,
    DownloadCancelled,
    DownloadError,
    HubNotFoundError,
    OfflineError,
)
from engine.paths import models_dir
from engine.units import format_size

if TYPE_CHECKING:
    from huggingface_hub import HfFileMetadata

log = logging.getLogger(__name__)

DOWNLOAD_COMMAND = "hyflash download {id}"
PROGRESS_STEP = 256 * 1024  # bytes between progress callbacks (cancel is checked per read)
MAX_ATTEMPTS = 10  # requests per call when the connection keeps dropping (each resumes)
MAX_STALLED = 3  # consecutive attempts that received nothing before giving up
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))  # full disk, full quota
_TRANSIENT = (408, 429, 500, 502, 503, 504)  # HTTP statuses worth another attempt

Progress = Callable[[int, int | None], None]  # (bytes done, total bytes or None)


@dataclass(frozen=True)
class HubSource:
    repo: str
    file: str
    sha256: str | None = None
    revision: str = "main"

    @classmethod
    def of(cls, entry: CatalogEntry) -> HubSource:
        src = entry.source
        if src.get("kind") != "hub":
            raise ModelLoadError(f"{entry.id} is not a Hub model (source kind {src.get('kind')})")
        file = str(src["file"])
        parts = file.split("/")
        if file.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ModelLoadError(f"Bad file name in the catalog entry {entry.id}: {file}")
        sha = src.get("sha256")
        return cls(src["repo"], file, sha.lower() if sha else None, src.get("revision") or "main")


@dataclass(frozen=True)
class InstalledModel:
    id: str
    name: str
    repo: str
    file: str
    revision: str
    commit: str | None
    sha256: str | None
    size_bytes: int
    path: str
    downloaded_at: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Paths:
    final: Path
    manifest: Path
    part: Path
    part_meta: Path
    lock: Path


def _paths(src: HubSource) -> _Paths:
    final = models_dir() / src.repo.replace("/", "--") / Path(*src.file.split("/"))
    return _Paths(
        final=final,
        manifest=_suffixed(final, ".manifest.json"),
        part=_suffixed(final, ".part"),
        part_meta=_suffixed(final, ".part.json"),
        lock=_suffixed(final, ".lock"),
    )


def _suffixed(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _offline() -> bool:
    # Read the env on every call: huggingface_hub reads HF_HUB_OFFLINE only at import.
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return value in ("1", "true", "yes", "on") or constants.is_offline_mode()


# ---------------------------------------------------------------------------------------------
# Installed models


def _installed(src: HubSource, p: _Paths) -> bool:
    manifest = read_json(p.manifest)
    if manifest is None or not p.final.is_file():
        return False
    # A catalog update that pins a new sha256 makes the old copy stale.
    if src.sha256 and manifest.get("sha256") != src.sha256:
        return False
    size, content = manifest.get("size_bytes"), manifest.get("content_sha256")
    if not isinstance(content, str):  # a manifest from before content digests were kept
        return size == p.final.stat().st_size
    return isinstance(size, int) and still_verified(
        p.final, content, size, manifest.get("mtime_ns")
    )


def is_installed(entry: CatalogEntry) -> bool:
    src = HubSource.of(entry)
    return _installed(src, _paths(src))


def cached_model_path(entry: CatalogEntry) -> Path:
    """The downloaded file of a Hub catalog entry; never touches the network."""
    src = HubSource.of(entry)
    p = _paths(src)
    if _installed(src, p):
        return p.final
    if p.final.is_file() and p.manifest.is_file():
        raise ModelLoadError(
            f"{entry.name} at {p.final} is not the file that was downloaded (damaged, changed "
            f"since or superseded). Download it again with: {DOWNLOAD_COMMAND.format(id=entry.id)}"
        )
    size = f" ({format_size(entry.size_bytes)})" if entry.size_bytes else ""
    partial = " A partial download exists and will resume." if p.part.exists() else ""
    raise ModelLoadError(
        f"{entry.name} is not downloaded yet{size}.{partial} "
        f"Download it with: {DOWNLOAD_COMMAND.format(id=entry.id)}"
    )


def list_installed() -> list[InstalledModel]:
    root = models_dir()
    out = []
    for manifest_path in sorted(root.glob("*/**/*.manifest.json")) if root.is_dir() else []:
        m = read_json(manifest_path)
        final = manifest_path.with_name(manifest_path.name.removesuffix(".manifest.json"))
        if not m or not final.is_file() or final.stat().st_size != m.get("size_bytes"):
            continue
        out.append(
            InstalledModel(
                id=m.get("id", final.name),
                name=m.get("name", final.name),
                repo=m.get("repo", ""),
                file=m.get("file", final.name),
                revision=m.get("revision", ""),
                commit=m.get("commit"),
                sha256=m.get("sha256"),
                size_bytes=final.stat().st_size,
                path=str(final),
                downloaded_at=m.get("downloaded_at", ""),
            )
        )
    return out


def delete_model(entry: CatalogEntry) -> int:
    """Remove the model and any partial download; returns the bytes freed."""
    p = _paths(HubSource.of(entry))
    freed = 0
    # Manifest first: from that moment the model no longer counts as installed.
    for path in (p.manifest, p.final, p.part, p.part_meta, p.lock):
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    parent = p.final.parent
    while parent != models_dir() and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return freed


# ---------------------------------------------------------------------------------------------
# Download


def _open_partial(path: Path) -> BinaryIO:
    """Open the partial file for appending (a seam: tests swap in a disk that fills up)."""
    return open(path, "ab")  # noqa: SIM115 - closed by the caller


def _check_space(where: Path, need: int, what: str) -> None:
    free = shutil.disk_usage(_existing_ancestor(where)).free
    if free < need:
        raise DiskFullError(
            f"Not enough disk space to download {what}: need {format_size(need)}, "
            f"have {format_size(free)} free in {where}."
        )


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return path


def download_model(
    entry: CatalogEntry,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    *,
    force: bool = False,
) -> Path:
    """Download (or resume) a Hub catalog entry into the cache and return its path.

    Raises DownloadError subclasses with user-facing messages: DownloadCancelled (partial kept,
    the next call resumes), ChecksumError (nothing kept), DiskFullError, HubNotFoundError,
    OfflineError. The sha256 is checked against the catalog's value, else against the Hub's
    LFS ETag (which is the content sha256); files with neither are only size-checked."""
    from filelock import FileLock
    from filelock import Timeout as LockTimeout

    src = HubSource.of(entry)
    p = _paths(src)
    if not force and _installed(src, p):
        return p.final
    if _offline():
        raise OfflineError(
            f"{entry.name} is not downloaded and offline mode is on (HF_HUB_OFFLINE=1). "
            f"Unset HF_HUB_OFFLINE and run: {DOWNLOAD_COMMAND.format(id=entry.id)}"
        )
    try:
        p.final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(p.lock, timeout=0):
            return _download_locked(entry, src, p, progress, cancel)
    except LockTimeout as exc:
        raise DownloadError(
            f"{entry.name} is already being downloaded by another window or process."
        ) from exc
    except OSError as exc:  # our own file I/O; network errors arrive as DownloadError
        if exc.errno in _DISK_FULL:
            raise _disk_full(entry, p) from exc
        raise DownloadError(
            f"Could not write {entry.name} to the model cache {p.final.parent}: {exc}"
        ) from exc


def _disk_full(entry: CatalogEntry, p: _Paths) -> DiskFullError:
    kept = p.part.stat().st_size if p.part.exists() else 0
    free = shutil.disk_usage(_existing_ancestor(p.final.parent)).free
    need = max(entry.size_bytes - kept, 0)
    need_txt = f"need {format_size(need)} more, " if entry.size_bytes else ""
    return DiskFullError(
        f"The disk filled up while downloading {entry.name}: {need_txt}have {format_size(free)} "
        f"free. The {format_size(kept)} downloaded so far are kept in {p.part} and the download "
        "resumes from there once space is freed (or delete the model to discard them)."
    )


@dataclass(frozen=True)
class _Job:
    """One download call's fixed inputs, handed down its steps together."""

    entry: CatalogEntry
    src: HubSource
    p: _Paths
    endpoint: str
    progress: Progress | None
    cancel: threading.Event | None


@dataclass
class _Received:
    """The partial file's byte count and running sha256: shared with the transfer loop so
    both stay current when a read fails midway."""

    done: int
    sha: hashlib._Hash


def _download_locked(
    entry: CatalogEntry,
    src: HubSource,
    p: _Paths,
    progress: Progress | None,
    cancel: threading.Event | None,
) -> Path:
    from huggingface_hub import constants

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    job = _Job(entry, src, p, endpoint, progress, cancel)
    meta, url, headers = _remote_file(job)
    total = meta.size or None
    expected_sha = _expected_sha(src, meta.etag)
    # Whatever sits at the final path is stale (or being forced out): drop it, manifest first,
    # so no crash from here on can pair the new manifest with the old file.
    p.manifest.unlink(missing_ok=True)
    p.final.unlink(missing_ok=True)
    resume = _prepare_partial(job, meta, total)

    get_url = meta.location or url
    if urlsplit(get_url)[:2] != urlsplit(url)[:2]:
        headers.pop("authorization", None)  # a signed CDN URL must not receive the Hub token
    done, sha = _transfer(job, get_url, headers, resume, total)
    _install(job, meta, done, total, sha, expected_sha)
    return p.final


def _remote_file(job: _Job) -> tuple[HfFileMetadata, str, dict[str, str]]:
    """The Hub's metadata of the file (commit, ETag, size, CDN location), its URL and the
    request headers."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    src, endpoint = job.src, job.endpoint
    url = hf_hub_url(src.repo, src.file, revision=src.revision, endpoint=endpoint)
    headers = build_hf_headers(library_name="hyflash-chat")
    try:
        meta = get_hf_file_metadata(
            url, timeout=constants.HF_HUB_ETAG_TIMEOUT, headers=headers, endpoint=endpoint
        )
    except Exception as exc:  # noqa: BLE001 - mapped to one clear message
        raise hub_error(exc, src, endpoint) from exc
    if not meta.etag or not meta.commit_hash:
        raise DownloadError(f"{endpoint} does not look like a Hugging Face Hub (no ETag/commit).")
    return meta, url, headers


def _expected_sha(src: HubSource, etag: str) -> str | None:
    """The sha256 the download must have: the catalog's, else the Hub's LFS ETag."""
    hub_sha = etag.lower() if _SHA256.match(etag.lower()) else None
    if src.sha256 and hub_sha and hub_sha != src.sha256:
        # The Hub already tells us the content differs: don't download gigabytes to learn it.
        raise ChecksumError(
            f"The file on the Hub ({src.repo}/{src.file}@{src.revision}) has sha256 {hub_sha}, "
            f"but the catalog expects {src.sha256}. Nothing was downloaded; the catalog entry "
            "needs updating."
        )
    return src.sha256 or hub_sha


def _prepare_partial(job: _Job, meta: HfFileMetadata, total: int | None) -> int:
    """Keep a partial download only if it belongs to this exact remote version; check the
    disk space for the rest. Returns the bytes kept."""
    p, entry = job.p, job.entry
    part_meta = read_json(p.part_meta) or {}
    resume = p.part.stat().st_size if p.part.exists() else 0
    if resume and (part_meta.get("etag") != meta.etag or (total is not None and resume > total)):
        log.info("discarding a partial download of another version of %s", job.src.file)
        p.part.unlink()
        resume = 0
    if total or entry.size_bytes:
        _check_space(p.final.parent, (total or entry.size_bytes) - resume, entry.name)
    write_json(p.part_meta, {"etag": meta.etag, "commit": meta.commit_hash, "size": total})
    return resume


def _install(
    job: _Job,
    meta: HfFileMetadata,
    done: int,
    total: int | None,
    sha: str,
    expected_sha: str | None,
) -> None:
    """Check the finished partial file, then move it into place after its manifest."""
    p, entry, src = job.p, job.entry, job.src
    if total is not None and done != total:
        raise DownloadError(
            f"Download of {entry.name} ended early ({done} of {total} bytes). Run it again to "
            "resume."
        )
    if expected_sha and sha != expected_sha:
        p.part.unlink(missing_ok=True)
        p.part_meta.unlink(missing_ok=True)
        raise ChecksumError(
            f"Checksum mismatch for {src.repo}/{src.file}: expected sha256 {expected_sha}, "
            f"got {sha}. The corrupt download was deleted; run the download again."
        )
    write_json(
        p.manifest,
        {
            "id": entry.id,
            "name": entry.name,
            "repo": src.repo,
            "file": src.file,
            "revision": src.revision,
            "commit": meta.commit_hash,
            "etag": meta.etag,
            "sha256": sha if expected_sha else None,
            "sha256_verified": bool(expected_sha),
            "size_bytes": done,
            "content_sha256": sha,  # what arrived: a later change of the file is seen by it
            "mtime_ns": p.part.stat().st_mtime_ns,  # kept by the rename below
            "downloaded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    os.replace(p.part, p.final)
    p.part_meta.unlink(missing_ok=True)


def _hash_prefix(path: Path, size: int) -> hashlib._Hash:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        remaining = size
        while remaining > 0:
            block = f.read(min(1 << 20, remaining))
            if not block:
                break
            h.update(block)
            remaining -= len(block)
    return h


def _transfer(
    job: _Job, url: str, headers: dict[str, str], resume: int, total: int | None
) -> tuple[int, str]:
    """Stream `url` into the partial file from byte `resume`; returns (bytes on disk, sha256
    hex).

    Dropped connections are retried in place with a Range request, at most MAX_ATTEMPTS
    requests per call and MAX_STALLED in a row that brought no bytes."""
    import httpx2
    from huggingface_hub import errors as hf_errors

    got = _Received(resume, _hash_prefix(job.p.part, resume) if resume else hashlib.sha256())
    stalled = 0
    last_error: Exception | None = None
    for _attempt in range(MAX_ATTEMPTS):
        if total is not None and got.done >= total:
            break
        _check_cancel(job, got.done, total)
        before = got.done
        try:
            if _fetch(job, url, headers, got, total):
                break
        except (httpx2.TransportError, hf_errors.HfHubHTTPError) as exc:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if isinstance(exc, hf_errors.HfHubHTTPError) and status not in _TRANSIENT:
                raise hub_error(exc, job.src, job.endpoint) from exc
            last_error = exc
            stalled = 0 if got.done > before else stalled + 1
            log.warning("download of %s interrupted at %d bytes: %s", job.src.file, got.done, exc)
            if stalled >= MAX_STALLED:
                break
            if stalled:
                time.sleep(min(0.5 * stalled, 2.0))
    if total is not None and got.done < total:
        err = hub_error(last_error, job.src, job.endpoint) if last_error else None
        raise DownloadError(
            f"The download of {job.entry.name} kept failing (connection dropped or server busy):"
            f" {format_size(got.done)} of {format_size(total)} kept; run the download again to "
            "resume." + (f" ({err})" if err else "")
        ) from last_error
    return got.done, got.sha.hexdigest()


def _fetch(job: _Job, url: str, headers: dict[str, str], got: _Received, total: int | None) -> bool:
    """One request for the bytes from `got.done` on, appended to the partial file. True when
    the transfer is over: the partial already holds every byte, or an unsized stream ended
    cleanly (there is no size to compare with)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session, hf_raise_for_status

    req_headers = {**headers, "Accept-Encoding": "identity"}
    if got.done:
        req_headers["Range"] = f"bytes={got.done}-"
    with get_session().stream(
        "GET",
        url,
        headers=req_headers,
        follow_redirects=True,
        timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
    ) as response:
        if response.status_code == 416 and got.done:
            return True  # size and sha checks follow
        hf_raise_for_status(response)
        if got.done and response.status_code != 206:
            got.done, got.sha = 0, hashlib.sha256()  # server ignored Range: start over
            job.p.part.write_bytes(b"")
        if job.progress:
            job.progress(got.done, total)
        with _open_partial(job.p.part) as f:
            if f.tell() > got.done:  # bytes past the prefix from a failed write
                f.truncate(got.done)
            reported = got.done
            # Unsized reads: every byte that arrived is kept if the connection drops.
            for chunk in response.iter_bytes():
                _check_cancel(job, got.done, total)
                f.write(chunk)
                got.sha.update(chunk)
                got.done += len(chunk)
                if job.progress and (got.done - reported >= PROGRESS_STEP or got.done == total):
                    job.progress(got.done, total)
                    reported = got.done
    return total is None


def _check_cancel(job: _Job, done: int, total: int | None) -> None:
    if job.cancel is not None and job.cancel.is_set():
        of = f" of {format_size(total)}" if total else ""
        raise DownloadCancelled(
            f"Download of {job.entry.name} cancelled; {format_size(done)}{of} kept, and the next "
            "download resumes from there."
        )


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
