"""The demo target's command line: ``python -m effect_broker.demo.payment_target``.

Its first stdout line, ``payment target listening on URL (db PATH)``, is the contract
with whoever starts it (``up``, the crash matrix, the fault suite): they wait for it,
and with ``--port 0`` read the port from it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from effect_broker.config.hosts import http_url
from effect_broker.demo.payment_target.app import build_app

#: What ``python -m`` runs.
MODULE = "effect_broker.demo.payment_target"
#: Where transactional mode reads the kit's shared secret: the environment, never argv
#: (which every user of the machine can read in the process list).
KIT_SECRET_ENV = "PAYMENT_TARGET_KIT_SECRET"
#: The first stdout line, as whoever starts the target waits for it; group 1 is its URL.
BANNER = re.compile(r"payment target listening on (http://\S+)")


def command(
    db: Path,
    *,
    port: int = 0,
    settlement_delay: float | None = None,
    key_retention: float | None = None,
    database_url: str | None = None,
    hang_after_commit: Sequence[str] = (),
) -> list[str]:
    """The command that starts the target in this Python, on ``port`` (0: a free one,
    named by its banner); an option left out keeps the target's default. Transactional
    mode (``database_url``) also needs ``KIT_SECRET_ENV`` in the child's environment."""
    argv = [sys.executable, "-m", MODULE, "--port", str(port), "--db", str(db)]
    if settlement_delay is not None:
        argv += ["--settlement-delay", str(settlement_delay)]
    if key_retention is not None:
        argv += ["--key-retention", str(key_retention)]
    if database_url is not None:
        argv += ["--database-url", database_url]
    if hang_after_commit:
        argv += ["--hang-after-commit", *hang_after_commit]
    return argv


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Demo payment target with an authoritative SQLite charges table.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=9000, help="port to listen on (0: pick a free one)"
    )
    parser.add_argument("--db", required=True, type=Path, help="SQLite file to keep")
    parser.add_argument(
        "--settlement-delay",
        type=_seconds,
        default=0.5,
        metavar="SECONDS",
        help="how long a reconcilable charge stays invisible to the lookup",
    )
    parser.add_argument(
        "--key-retention",
        type=_seconds,
        default=86400.0,
        metavar="SECONDS",
        help="how long an idempotency key is remembered",
    )
    parser.add_argument(
        "--hang-after-commit",
        nargs="+",
        default=[],
        metavar="PATH_PREFIX",
        help="charges under these path prefixes commit and then never answer",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="PostgreSQL database for transactional mode (POST /transactional/v1/charges"
        f" and the target kit's endpoints; shared secret in ${KIT_SECRET_ENV})",
    )
    parser.add_argument(
        "--tombstone-wait",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="how long a tombstone waits for a charge committing right now (then 503)",
    )
    args = parser.parse_args(argv)
    args.kit_secret = os.environ.get(KIT_SECRET_ENV)
    if args.database_url and not args.kit_secret:
        parser.error(f"--database-url needs the kit's shared secret in ${KIT_SECRET_ENV}")
    return args


async def serve(args: argparse.Namespace) -> None:
    """Listen until SIGTERM or SIGINT, then stop cleanly (withheld answers dropped)."""
    app = build_app(
        args.db,
        settlement_delay=args.settlement_delay,
        key_retention=args.key_retention,
        hang_after_commit=args.hang_after_commit,
        database_url=args.database_url,
        kit_secret=args.kit_secret,
        tombstone_wait=args.tombstone_wait,
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = http_url(host, port)
        print(f"payment target listening on {url} (db {args.db})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s"
    )
    asyncio.run(serve(args))
