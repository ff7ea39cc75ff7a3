"""Hub downloads through the real huggingface_hub client against a local stand-in Hub.

The stub speaks the parts of the Hub protocol huggingface_hub 2.x uses: HEAD/GET on
/{repo}/resolve/{revision}/{file} answering like an LFS file (302 to a CDN on another origin
with X-Repo-Commit, X-Linked-Etag = sha256, X-Linked-Size) or like a small git file (200 with
ETag and Content-Length), 404s with X-Error-Code, and Range requests answered with 206.
"""

from __future__ import annotations

import errno
import hashlib
import random
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine import paths
from engine.commands import download as download_command
from engine.events import ModelLoadError
from engine.models import download_errors, downloads
from engine.models.catalog import CatalogEntry

REPO = "test-org/tiny-GGUF"
FILE = "tiny-q4.gguf"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DATA = b"GGUF" + random.Random(0).randbytes((1 << 20) - 4)  # 1 MiB
SHA = hashlib.sha256(DATA).hexdigest()
TOKEN = "hf_stubtoken"


class HubStub:
    """Two threaded HTTP servers on 127.0.0.1: the Hub and its 'CDN' (another origin)."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {(REPO, FILE): DATA}
        self.lfs = True  # answer like an LFS file (redirect + sha256 ETag)
        self.drop_after: int | None = None  # cut each GET body after this many bytes...
        self.drops_left = 0  # ...this many times
        self.corrupt = False
        self.ignore_range = False
        self.cdn_status: int | None = None  # answer CDN GETs with this error status
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.hub = self._serve()
        self.cdn = self._serve()
        self.url = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        # Failsafe: whatever the test does, the servers stop on their own.
        self.watchdog = threading.Timer(120, self.close)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _serve(self) -> ThreadingHTTPServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a stuck client cannot hold a handler thread forever

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                stub.handle(self, head=True)

            def do_GET(self) -> None:
                stub.handle(self, head=False)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.handle_error = lambda *a: None  # client hang-ups (cancel) are expected
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return server

    def close(self) -> None:
        for server in (self.hub, self.cdn):
            server.shutdown()
            server.server_close()
        self.watchdog.cancel()

    def gets(self, role: str = "cdn") -> list[dict]:
        return [r for r in self.requests if r["method"] == "GET" and r["role"] == role]

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        role = "hub" if h.server is self.hub else "cdn"
        with self.lock:
            self.requests.append(
                {
                    "role": role,
                    "method": h.command,
                    "path": h.path,
                    "range": h.headers.get("Range"),
                    "auth": h.headers.get("Authorization"),
                }
            )
        if role == "cdn" and self.cdn_status and not head:
            return h.send_error(self.cdn_status)
        if role == "cdn":
            key = h.path.removeprefix("/cdn/")
            data = next(
                (d for d in self.files.values() if hashlib.sha256(d).hexdigest() == key), None
            )
            return self._send_bytes(h, data, head) if data is not None else h.send_error(404)
        parts = h.path.lstrip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return h.send_error(404)
        repo, file = "/".join(parts[:2]), "/".join(parts[4:])
        data = self.files.get((repo, file))
        if data is None:
            h.send_response(404)
            known_repo = any(r == repo for r, _ in self.files)
            h.send_header("X-Error-Code", "EntryNotFound" if known_repo else "RepoNotFound")
            h.send_header("X-Error-Message", "Entry not found")
            h.send_header("X-Repo-Commit", COMMIT)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        sha = hashlib.sha256(data).hexdigest()
        if self.lfs:
            h.send_response(302)
            h.send_header("Location", f"{self.cdn_url}/cdn/{sha}")
            h.send_header("X-Repo-Commit", COMMIT)
            h.send_header("X-Linked-Etag", f'"{sha}"')
            h.send_header("X-Linked-Size", str(len(data)))
            h.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._send_bytes(h, data, head, etag=hashlib.sha1(data).hexdigest())

    def _send_bytes(
        self, h: BaseHTTPRequestHandler, data: bytes, head: bool, etag: str | None = None
    ) -> None:
        start = 0
        rng = h.headers.get("Range")
        if rng and not self.ignore_range:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                h.send_response(416)
                h.send_header("Content-Range", f"bytes */{len(data)}")
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            h.send_response(200)
        body = data[start:]
        if self.corrupt:
            body = body[:1000] + bytes([body[1000] ^ 0xFF]) + body[1001:]
        h.send_header("Content-Length", str(len(body)))
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", f'"{etag or hashlib.sha256(data).hexdigest()}"')
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        if head:
            return
        with self.lock:
            drop = self.drop_after is not None and self.drops_left > 0
            self.drops_left -= drop
        if drop:
            body = body[: self.drop_after]
            h.close_connection = True
        try:
            h.wfile.write(body)
            h.wfile.flush()
        except OSError:
            pass  # the client cancelled


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    from huggingface_hub import constants

    stub = HubStub()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setenv("HYFLASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # in case it was set at import
    try:
        yield stub
    finally:
        stub.close()


def entry(
    file: str = FILE, sha: str | None = SHA, repo: str = REPO, eid: str = "tiny"
) -> CatalogEntry:
    return CatalogEntry(
        id=eid,
        name=f"Tiny ({eid})",
        size_bytes=len(DATA),
        source={"kind": "hub", "repo": repo, "file": file, "sha256": sha, "revision": "main"},
    )


def leftovers(e: CatalogEntry) -> list[str]:
    folder = paths.models_dir() / e.source["repo"].replace("/", "--")
    # The lock file stays on POSIX and goes on Windows: not part of what a test checks.
    names = [p.name for p in folder.iterdir()] if folder.exists() else []
    return sorted(n for n in names if not n.endswith(".lock"))


def test_download_verifies_sha256_and_installs(hub: HubStub) -> None:
    e = entry()
    with pytest.raises(ModelLoadError, match="not downloaded yet.*hyflash download tiny"):
        downloads.cached_model_path(e)
    seen: list[tuple[int, int | None]] = []
    path = downloads.download_model(e, progress=lambda d, t: seen.append((d, t)))

    assert path.read_bytes() == DATA
    assert downloads.cached_model_path(e) == path
    assert seen[-1] == (len(DATA), len(DATA)) and seen == sorted(seen)
    assert leftovers(e) == [FILE, f"{FILE}.manifest.json"]
    [installed] = downloads.list_installed()
    assert (installed.id, installed.size_bytes, installed.sha256) == ("tiny", len(DATA), SHA)
    assert installed.commit == COMMIT and installed.path == str(path)
    # The token goes to the Hub, never to the CDN's signed URL.
    assert [r["auth"] for r in hub.requests if r["role"] == "hub"] == [f"Bearer {TOKEN}"]
    assert [(r["range"], r["auth"]) for r in hub.gets()] == [(None, None)]

    n = len(hub.requests)
    assert downloads.download_model(e) == path
    assert len(hub.requests) == n  # installed: no network at all


def test_a_download_changed_on_disk_is_no_longer_taken_for_it(hub: HubStub) -> None:
    """The same size, other bytes (a disk error, an edit): seen by its content once its
    modification time moved, and downloaded again when asked."""
    e = entry()
    path = downloads.download_model(e)
    with open(path, "r+b") as f:
        f.seek(len(DATA) // 2)
        f.write(b"\0" * 16)
    assert not downloads.is_installed(e)
    with pytest.raises(ModelLoadError, match="not the file that was downloaded.*hyflash download"):
        downloads.cached_model_path(e)
    assert downloads.download_model(e).read_bytes() == DATA
    assert downloads.cached_model_path(e) == path


def test_dropped_connection_resumes_with_range(hub: HubStub) -> None:
    hub.drop_after, hub.drops_left = 300_000, 1
    path = downloads.download_model(entry())
    assert path.read_bytes() == DATA
    assert [r["range"] for r in hub.gets()] == [None, "bytes=300000-"]


def test_next_call_resumes_after_connection_keeps_dropping(hub: HubStub) -> None:
    e = entry()
    hub.drop_after, hub.drops_left = 50_000, 1000
    with pytest.raises(download_errors.DownloadError, match="kept failing.*run the download again"):
        downloads.download_model(e)
    kept = downloads.MAX_ATTEMPTS * 50_000
    part = paths.models_dir() / "test-org--tiny-GGUF" / f"{FILE}.part"
    assert part.read_bytes() == DATA[:kept]
    assert len(hub.gets()) == downloads.MAX_ATTEMPTS

    hub.drops_left = 0
    seen: list[int] = []
    path = downloads.download_model(e, progress=lambda d, t: seen.append(d))
    assert path.read_bytes() == DATA
    assert hub.gets()[-1]["range"] == f"bytes={kept}-"
    assert seen[0] == kept  # progress starts where the partial ends
    assert not part.exists()


def test_cancel_keeps_a_resumable_partial(hub: HubStub) -> None:
    e = entry()
    cancel = threading.Event()

    def progress(done: int, total: int | None) -> None:
        if done > 0:
            cancel.set()

    with pytest.raises(download_errors.DownloadCancelled, match="cancelled.*resumes"):
        downloads.download_model(e, progress=progress, cancel=cancel)
    part = paths.models_dir() / "test-org--tiny-GGUF" / f"{FILE}.part"
    kept = part.stat().st_size
    assert 0 < kept < len(DATA) and part.read_bytes() == DATA[:kept]
    with pytest.raises(ModelLoadError, match="partial download exists"):
        downloads.cached_model_path(e)
    assert downloads.list_installed() == []

    path = downloads.download_model(e)
    assert path.read_bytes() == DATA
    assert hub.gets()[-1]["range"] == f"bytes={kept}-"


def test_server_ignoring_range_restarts_cleanly(hub: HubStub) -> None:
    hub.drop_after, hub.drops_left, hub.ignore_range = 300_000, 1, True
    assert downloads.download_model(entry()).read_bytes() == DATA
    assert len(hub.gets()) == 2


def test_partial_of_an_older_version_is_discarded(hub: HubStub) -> None:
    cancel = threading.Event()
    with pytest.raises(download_errors.DownloadCancelled):
        downloads.download_model(entry(), progress=lambda d, t: d and cancel.set(), cancel=cancel)
    new = DATA[::-1]  # the repo's file changed upstream: new content, new ETag
    hub.files[(REPO, FILE)] = new
    path = downloads.download_model(entry(sha=hashlib.sha256(new).hexdigest()))
    assert path.read_bytes() == new
    assert hub.gets()[-1]["range"] is None


def test_cdn_errors_are_clear(hub: HubStub) -> None:
    hub.cdn_status = 403
    with pytest.raises(download_errors.DownloadError, match="refused.*HTTP 403"):
        downloads.download_model(entry())
    assert len(hub.gets()) == 1  # a refusal is not retried
    hub.cdn_status = 503
    with pytest.raises(download_errors.DownloadError, match="kept failing"):
        downloads.download_model(entry())
    assert len(hub.gets()) == 1 + downloads.MAX_STALLED  # busy: retried, then given up
    assert downloads.list_installed() == []


def test_corrupt_transfer_fails_checksum_and_keeps_nothing(hub: HubStub) -> None:
    e = entry()
    hub.corrupt = True
    with pytest.raises(download_errors.ChecksumError, match=f"expected sha256 {SHA}"):
        downloads.download_model(e)
    assert leftovers(e) == []
    assert downloads.list_installed() == []
    with pytest.raises(ModelLoadError, match="not downloaded yet"):
        downloads.cached_model_path(e)


def test_catalog_sha_is_checked_for_non_lfs_files(hub: HubStub) -> None:
    hub.lfs = False  # plain 200 with a git (sha1) ETag: only the catalog's sha256 can verify
    with pytest.raises(download_errors.ChecksumError, match="Checksum mismatch"):
        downloads.download_model(entry(sha="ab" * 32))
    assert downloads.list_installed() == []
    path = downloads.download_model(entry(sha=None))  # unknown sha: size-checked only
    assert path.read_bytes() == DATA
    assert downloads.list_installed()[0].sha256 is None


def test_hub_sha_differing_from_catalog_fails_before_downloading(hub: HubStub) -> None:
    with pytest.raises(download_errors.ChecksumError, match="catalog expects"):
        downloads.download_model(entry(sha="cd" * 32))
    assert hub.gets() == []


@pytest.mark.parametrize("repo,file", [(REPO, "missing.gguf"), ("nobody/nothing", FILE)])
def test_404_is_a_clear_error(hub: HubStub, repo: str, file: str) -> None:
    e = entry(file=file, repo=repo)
    with pytest.raises(
        download_errors.HubNotFoundError, match=r"Not found on the Hub \(HTTP 404\)"
    ):
        downloads.download_model(e)
    assert not any(name.endswith((".part", ".gguf")) for name in leftovers(e))


def test_not_enough_disk_space_is_checked_first(hub: HubStub, monkeypatch) -> None:
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=200_000))
    with pytest.raises(download_errors.DiskFullError, match=r"need 1\.0 MB, have 0\.2 MB free"):
        downloads.download_model(entry())
    assert hub.gets() == []


def test_disk_filling_up_mid_download_keeps_a_clean_prefix(hub: HubStub, monkeypatch) -> None:
    e = entry()
    real_open = downloads._open_partial

    class FullDisk:
        """A file that accepts 300,000 bytes in total, then fails like a full disk."""

        def __init__(self, path: Path) -> None:
            self.f = real_open(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

        def tell(self) -> int:
            return self.f.tell()

        def truncate(self, n: int) -> int:
            return self.f.truncate(n)

        def write(self, b: bytes) -> int:
            room = 300_000 - self.f.tell()
            if len(b) > room:
                self.f.write(b[:room])
                self.f.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(b)

    monkeypatch.setattr(downloads, "_open_partial", FullDisk)
    with pytest.raises(download_errors.DiskFullError, match="disk filled up.*resumes"):
        downloads.download_model(e)
    part = paths.models_dir() / "test-org--tiny-GGUF" / f"{FILE}.part"
    assert part.read_bytes() == DATA[:300_000]
    with pytest.raises(ModelLoadError):
        downloads.cached_model_path(e)

    monkeypatch.setattr(downloads, "_open_partial", real_open)
    assert downloads.download_model(e).read_bytes() == DATA
    assert hub.gets()[-1]["range"] == "bytes=300000-"


def test_offline_mode_uses_only_the_cache(hub: HubStub, monkeypatch) -> None:
    e = entry()
    path = downloads.download_model(e)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests)
    assert downloads.download_model(e) == path
    assert downloads.cached_model_path(e) == path
    with pytest.raises(download_errors.OfflineError, match="HF_HUB_OFFLINE"):
        downloads.download_model(entry(file="other.gguf", eid="other"))
    assert len(hub.requests) == n


def test_delete_model_removes_everything(hub: HubStub) -> None:
    e = entry()
    downloads.download_model(e)
    assert downloads.delete_model(e) >= len(DATA)
    assert downloads.list_installed() == []
    assert not (paths.models_dir() / "test-org--tiny-GGUF").exists()
    assert downloads.delete_model(e) == 0


def test_cache_dir_defaults_to_the_platform_user_cache(monkeypatch) -> None:
    import platformdirs

    monkeypatch.delenv("HYFLASH_CACHE_DIR", raising=False)
    expected = Path(platformdirs.user_cache_dir("HyFlashChat", appauthor=False)) / "models"
    assert paths.models_dir() == expected
    monkeypatch.setenv("HYFLASH_CACHE_DIR", "/somewhere/else")
    assert paths.models_dir() == Path("/somewhere/else/models")


def test_non_hub_entries_and_bad_file_names_are_refused() -> None:
    pypi = CatalogEntry(id="x", name="x", source={"kind": "pypi", "package": "p", "file": "f"})
    with pytest.raises(ModelLoadError, match="not a Hub model"):
        downloads.download_model(pypi)
    with pytest.raises(ModelLoadError, match="Bad file name"):
        downloads.cached_model_path(entry(file="../escape.gguf"))


def test_resolve_target_finds_a_downloaded_hub_model(hub: HubStub, monkeypatch) -> None:
    from engine.models import resolve as models

    e = entry()
    monkeypatch.setattr(models, "load_catalog", lambda path=None: {e.id: e})
    with pytest.raises(ModelLoadError, match="hyflash download tiny"):
        models.resolve_target("tiny")
    path = downloads.download_model(e)
    assert models.resolve_target("tiny") == ("tiny", path)


def test_download_command(hub: HubStub, monkeypatch, capsys) -> None:
    import argparse

    e = entry()
    monkeypatch.setattr(download_command, "load_catalog", lambda path=None: {e.id: e})
    parser = argparse.ArgumentParser(prog="hyflash")
    download_command.add_parser(parser.add_subparsers())

    def run(*argv: str) -> int:
        args = parser.parse_args(["download", *argv])
        return args.func(args)

    assert run("tiny") == 0
    assert capsys.readouterr().out.strip().endswith(FILE)
    assert run("--list") == 0 and "installed" in capsys.readouterr().out
    assert run("nope") == 2
    assert run("--delete", "tiny") == 0 and downloads.list_installed() == []
    hub.files.clear()
    assert run("tiny") == 1 and "Not found on the Hub" in capsys.readouterr().err
