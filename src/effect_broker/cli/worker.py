"""One worker of ``serve --workers N`` (``python -m effect_broker.cli.worker``).

Started only by the supervisor (``cli/workers.py``): it reads its ``WorkerOrder`` (the
resolved settings, its index) from stdin, then serves like ``serve`` does, but on
``SO_REUSEPORT`` sockets shared with the other workers. stdin stays open while the
supervisor lives; end of file there means the supervisor is gone (killed with SIGKILL,
say), and the worker stops as on SIGTERM instead of serving on as an orphan.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading

from rich.console import Console

from effect_broker.cli.heartbeat import with_heartbeat
from effect_broker.cli.serve import announce_failpoints, run_on_fastest_loop, run_proxy
from effect_broker.cli.workers import WorkerOrder
from effect_broker.errors import EffectBrokerError

console = Console(stderr=True, soft_wrap=True, highlight=False)
STDIN = 0


def read_exactly(size: int) -> bytes:
    """``size`` bytes of stdin, read raw: the buffered ``sys.stdin`` holds a lock that a
    thread still reading it at exit would leave held, and Python aborts on that."""
    data = b""
    while len(data) < size:
        chunk = os.read(STDIN, size - len(data))
        if not chunk:
            raise EOFError("the supervisor closed stdin before the whole order")
        data += chunk
    return data


def read_order() -> object:
    """The supervisor's order: its length (8 bytes, big-endian), then its pickle."""
    size = int.from_bytes(read_exactly(8), "big")
    return pickle.loads(read_exactly(size))


def stop_when_orphaned() -> None:
    """SIGTERM this process once the supervisor's end of stdin closes."""

    def watch() -> None:
        while os.read(STDIN, 4096):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def main() -> int:
    order = read_order()
    if not isinstance(order, WorkerOrder):
        console.print(
            "[red]error:[/] effect_broker.cli.worker is started by serve --workers"
        )
        return 2
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(name)s [worker {order.index}] %(message)s",
    )
    announce_failpoints()
    stop_when_orphaned()
    try:
        serve = run_proxy(order.settings, reuse_port=True, worker=order.label)
        if order.heartbeat_fd is not None:
            serve = with_heartbeat(serve, order.heartbeat_fd, order.heartbeat_interval)
        run_on_fastest_loop(serve)
    except EffectBrokerError as exc:
        console.print(f"[red]error:[/] {order.label}: {exc.message}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
