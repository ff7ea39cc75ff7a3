"""The user's own HyFlash drafters: trained on this machine (`hyflash speedup`) and installed
into the app's data folder, each pinned by its card to one GGUF file by sha256, so the engine,
the app and the server find the drafter of a model that ships none, by the file's content.

Layout: <data dir>/drafters/<name>/ (a drafter folder: card.json, graphs, draft_vocab.npy).
The data dir is $HYFLASH_DATA_DIR, else the platform's user data folder of the app (where the
app keeps its chats). GGUF digests are remembered by path, size and modification time:
hashing a 2.5 GB model on every load would take seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.drafters.hyflash_card import CARD, CARD_FORMAT
from engine.events import DrafterMismatchError
from engine.file_hash import file_sha256
from engine.paths import drafters_dir

log = logging.getLogger(__name__)


def slug(text: str) -> str:
    """A folder-name-safe form of a model id: lower case, runs of other characters as '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "model"


# ----- installed drafters ---------------------------------------------------------------------


@dataclass(frozen=True)
class InstalledDrafter:
    name: str
    path: str
    target_sha256: str
    target_name: str
    target_file_size: int
    tau: float | None  # walked on held-out answers at block 16 when it was made (card)
    ngram_tau: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def read_card(folder: Path) -> dict:
    """A drafter folder's card, or DrafterMismatchError saying why it is not one."""
    try:
        card = json.loads((folder / CARD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DrafterMismatchError(f"{folder} is not a HyFlash drafter folder ({exc})") from None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise DrafterMismatchError(f"{folder} is not a HyFlash drafter folder (its {CARD})")
    return card


def _pinned(card: dict) -> str:
    target = card.get("target") or {}
    return str(target.get("gguf_sha256") or "") if isinstance(target, dict) else ""


def installed_drafters() -> list[InstalledDrafter]:
    """Drafters in the user's folder, newest first. Folders being installed are passed over;
    a folder whose card does not read is passed over with one warning line naming it (on
    stderr for the CLI and the server), so one bad card never stops the others."""
    root = drafters_dir()
    found = []
    for folder in root.iterdir() if root.is_dir() else []:
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            found.append((folder.stat().st_mtime, _installed(folder)))
        except DrafterMismatchError as exc:
            _warn_once(folder / CARD, str(exc))
    return [d for _, d in sorted(found, key=lambda x: x[0], reverse=True)]


def _installed(folder: Path) -> InstalledDrafter:
    card = read_card(folder)
    try:
        target = card.get("target") or {}
        check = card.get("validation") or {}
        return InstalledDrafter(
            name=str(card.get("name", folder.name)),
            path=str(folder),
            target_sha256=_pinned(card),
            target_name=str(target.get("name", "")),
            target_file_size=int(target.get("file_size") or 0),
            tau=_number(check.get("tau")),
            ngram_tau=_number(check.get("ngram_tau")),
        )
    except (AttributeError, TypeError, ValueError) as exc:
        raise DrafterMismatchError(f"{folder / CARD} has a bad value ({exc})") from None


def _number(value) -> float | None:
    return None if value is None else float(value)


_warned: set[tuple[str, int]] = set()


def _warn_once(card: Path, why: str) -> None:
    """One line per bad card and version of it, not one per lookup."""
    try:
        key = (str(card), card.stat().st_mtime_ns)
    except OSError:
        key = (str(card), 0)
    if key not in _warned:
        _warned.add(key)
        log.warning("skipped the drafter in %s: %s", card.parent, why)


def find_drafter(*, sha256: str | None = None, gguf: str | Path | None = None) -> Path | None:
    """The newest installed drafter pinned to this GGUF (by a known sha256, else the file's;
    a file is hashed only when some drafter was made for a file of its size)."""
    drafters = installed_drafters()
    if sha256 is None and gguf is not None:
        size = Path(gguf).stat().st_size
        if not any(d.target_file_size == size for d in drafters):
            return None
        sha256 = file_sha256(gguf)
    for d in drafters:
        if sha256 and d.target_sha256 == sha256:
            return Path(d.path)
    return None


def install_drafter(source: Path, gguf: Path, name: str) -> Path:
    """Copy a drafter folder into the user's drafters as `name`, atomically: the copy is made
    beside, checked and renamed into place (replacing an earlier drafter for the same GGUF).
    A folder whose card pins another GGUF is refused, and so is a name taken by another
    GGUF's drafter; either way nothing is installed."""
    sha = file_sha256(gguf)
    card = read_card(source)
    if _pinned(card) != sha:
        raise DrafterMismatchError(_other_gguf(source, card, gguf, sha))
    root = drafters_dir()
    dest = root / name
    if dest.exists() and _pinned(read_card(dest)) != sha:
        raise DrafterMismatchError(
            f"{dest} already holds the drafter of another GGUF: nothing was installed. "
            "Remove that folder or install under another name."
        )
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}.installing-{os.getpid()}"
    old = root / f".{name}.replaced-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(source, tmp)
        if _pinned(read_card(tmp)) != sha:  # the card changed while it was copied
            raise DrafterMismatchError(_other_gguf(source, read_card(tmp), gguf, sha))
        if dest.exists():
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except OSError:
            if old.exists():  # put the earlier drafter back
                os.replace(old, dest)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def _other_gguf(folder: Path, card: dict, gguf: Path, sha: str) -> str:
    target = card.get("target") or {}
    pinned = _pinned(card) or "none"
    return (
        f"The drafter in {folder} was trained for another GGUF ({target.get('name') or '?'}, "
        f"sha256 {pinned[:12]}...), not {gguf.name} ({sha[:12]}...): nothing was installed."
    )
