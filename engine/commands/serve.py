"""`hyflash serve`: the OpenAI-compatible server on the command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from engine.commands.engine_args import add_engine_args, load_engine
from engine.events import GenerationSettings
from engine.options import OPTION
from engine.server.config import ServerConfig
from engine.server.jobs import DEFAULT_MAX_WAITING, EngineThread

_DEFAULTS = ServerConfig()
API_KEY_ENV = "HYFLASH_API_KEY"
_BLOCK = OPTION["block_size"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, "
        "/v1/completions, /v1/models, /health). Binds 127.0.0.1 unless told otherwise; any other "
        "address requires --api-key.",
    )
    p.add_argument(
        "--host", default=_DEFAULTS.host, help=f"address to bind (default: {_DEFAULTS.host})"
    )
    p.add_argument(
        "--port",
        type=int,
        default=_DEFAULTS.port,
        help=f"port (default: {_DEFAULTS.port}; 0: any free)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (visible to `ps`: prefer --api-key-file or "
        f"${API_KEY_ENV})",
    )
    p.add_argument(
        "--api-key-file", default=None, metavar="FILE", help="the API key, read from this file"
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to this host name (besides loopback's and the "
        "bound address; a request for any other name is refused: DNS rebinding)",
    )
    p.add_argument(
        "--cors", action="append", default=[], metavar="ORIGIN", help="allow this browser origin"
    )
    p.add_argument(
        _BLOCK.flag,
        type=_BLOCK.type,
        default=_DEFAULTS.block_size,
        help=f"{_BLOCK.range}, for requests that do not set hyflash.block_size "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--queue-size",
        type=int,
        default=DEFAULT_MAX_WAITING,
        help=f"requests that may wait; more get 503 (default: {DEFAULT_MAX_WAITING})",
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=_DEFAULTS.max_body_bytes, help="largest request body"
    )
    add_engine_args(p)
    p.set_defaults(func=cmd_serve)


def api_key_of(args: argparse.Namespace) -> str | None:
    """--api-key, else the first line of --api-key-file, else $HYFLASH_API_KEY; None: none."""
    if args.api_key:
        return args.api_key
    if args.api_key_file:
        try:
            lines = Path(args.api_key_file).expanduser().read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read the API key file: {exc}") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise ValueError(f"the API key file {args.api_key_file} is empty")
        return key
    return os.environ.get(API_KEY_ENV) or None


def cmd_serve(args: argparse.Namespace) -> int:
    # FastAPI and uvicorn load only when serving: `hyflash` builds this parser for every command
    from engine.server.app import create_app
    from engine.server.http import LocalServer, check_bind

    try:
        api_key = api_key_of(args)
        check_bind(args.host, api_key)
        GenerationSettings(block_size=args.block_size)  # its message when the size is bad
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = ServerConfig(
        host=args.host,
        port=args.port,
        api_key=api_key,
        allowed_hosts=tuple(args.allow_host),
        cors_origins=tuple(args.cors),
        max_body_bytes=args.max_body_bytes,
        block_size=args.block_size,
    )
    engine = load_engine(args)
    runner = EngineThread(engine, max_waiting=args.queue_size)
    info = engine.info()  # taken before the engine thread owns the engine
    try:
        server = LocalServer(
            create_app(config, runner.jobs, lambda: info), args.host, args.port, quiet=False
        )
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        engine.close()
        return 2
    runner.start()
    print(
        f"Serving {info.model_id} (drafter {info.drafter}, block size {args.block_size}) at "
        f"{server.url}/v1 — Ctrl-C stops.",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass  # uvicorn hands Ctrl-C back after its own graceful shutdown
    finally:
        runner.stop()
        engine.close()
    return 0
