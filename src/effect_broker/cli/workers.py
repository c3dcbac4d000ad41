"""``serve --workers N``: N proxy processes on the same ports, one supervisor over them.

One process serves one core: the flow, aiohttp and asyncpg are CPU-bound Python, so a
second core helps only through a second process. Each worker is a whole proxy (its own
pool, engine, reconciler and receipt cache) that opens the proxy and admin addresses with
``SO_REUSEPORT``; the kernel spreads new connections among them. They share nothing but
the ledger, which already arbitrates between processes: reservations are unique per
``(tenant, operation_key)``, every write is a compare-and-swap on ``version``, and each
worker's reconciler claims due effects with ``FOR UPDATE SKIP LOCKED`` (one reconciler per
worker; they never hold the same effect, and pruning deletes under the same lock).

The supervisor (this module) does no serving. It checks the addresses and routes once,
reserves each address (port 0 becomes one concrete port every worker binds), starts the
workers as fresh interpreters (``python -m effect_broker.cli.worker``) with the resolved
settings on their stdin, and then only waits:

* SIGTERM or SIGINT: forwarded (as SIGTERM) to every worker, which stops as a single
  ``serve`` does; after ``SHUTDOWN_DEADLINE`` seconds a worker still running is killed.
  Exit 0 when every worker stopped cleanly, 1 otherwise.
* a worker that exits on its own (crash, OOM kill, a failed start): reported with its
  pid and how it ended, the others are stopped the same way, exit 1. It is not respawned:
  a worker that dies at once would be restarted forever, and whatever runs the
  supervisor (systemd, Kubernetes, docker) already restarts a failed service with
  backoff and shows it. Nothing is lost by stopping: every effect in flight in the dead
  worker is in the ledger with a lease, and the next start's reconcilers settle it.

* a worker that hangs (paused, or its event loop stuck) is different: it holds its
  share of new connections and never exits, so each worker's loop beats on a pipe
  (``cli.heartbeat``) and one silent for ``worker_heartbeat_timeout`` is killed with
  SIGKILL and started again in its place, with one line saying so. Its in-flight
  effects are in the ledger with a lease, as after any crash.

The supervisor keeps each worker's stdin open; a worker whose stdin reaches end of file
(the supervisor was killed with SIGKILL) stops itself, so no orphan keeps serving.

Metrics: the supervisor gives the workers a shared ``PROMETHEUS_MULTIPROC_DIR`` (a fresh
temporary directory, removed at exit, unless one is set already) and any worker's
``/metrics`` answers for all of them (``effect_broker.metrics``).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from effect_broker.cli.addresses import ADDRESS_SETTINGS, bind_failure
from effect_broker.cli.heartbeat import Pulse, beat_interval
from effect_broker.config.settings import Settings
from effect_broker.errors import EffectBrokerError
from effect_broker.metrics import MULTIPROCESS_DIR
from effect_broker.server import split_address

console = Console(stderr=True, soft_wrap=True, highlight=False)

# How long stopping workers may take (in-flight requests finish, pools close) before
# the supervisor kills what is left.
SHUTDOWN_DEADLINE = 30.0
WORKER_COMMAND = (sys.executable, "-m", "effect_broker.cli.worker")


def parse_workers(value: str) -> int:
    """``--workers``: a whole number from 1, or ``auto`` for one per usable core."""
    text = value.strip().lower()
    if text == "auto":
        return usable_cores()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(
            f"{value!r} is not a number of workers: give a whole number from 1, or "
            "auto (one per core)"
        )
    return int(text)


def usable_cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class WorkerOrder:
    """What a worker reads from its stdin: everything it needs to serve."""

    settings: Settings
    index: int  # from 1
    count: int
    heartbeat_fd: int | None = None  # where its event loop beats (see ``heartbeat``)
    heartbeat_interval: float = 1.0

    @property
    def label(self) -> str:
        return f"worker {self.index}/{self.count} (pid {os.getpid()})"


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reserve(settings: Settings, field: str) -> tuple[socket.socket, str]:
    """Hold ``settings.<field>``'s address for the workers; returns the socket and the
    concrete address (port 0 resolved).

    First a plain bind, without ``SO_REUSEPORT``: it fails if anything listens there,
    including another supervisor's workers, which would otherwise silently share the
    port with ours. Then the held socket binds with ``SO_REUSEPORT`` and never listens,
    so the kernel sends it no connections while it keeps the port for the workers.
    """
    host, port = split_address(getattr(settings, field))
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(where)
            port = probe.getsockname()[1]
        held = socket.socket(family, kind, proto)
        try:
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            held.bind((*where[:1], port, *where[2:]))
        except BaseException:
            held.close()
            raise
    except OSError as exc:
        failure = bind_failure(settings, exc, field=field)
        if failure is None:
            raise EffectBrokerError(
                f"cannot open the {ADDRESS_SETTINGS[field][0]} address "
                f"{getattr(settings, field)}: {exc}"
            ) from exc
        raise failure from exc
    return held, format_address(host, port)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Worker:
    """One worker process as the supervisor holds it."""

    index: int
    process: asyncio.subprocess.Process
    pipe: int  # the write end of its stdin: closed, it tells the worker to stop
    pulse: Pulse
    exit: asyncio.Task[int]
    hung: bool = False  # killed by the supervisor for a silent heartbeat


class Supervisor:
    def __init__(self, settings: Settings, count: int, metrics_dir: Path) -> None:
        self.settings = settings
        self.count = count
        self.metrics_dir = metrics_dir
        self.deadline = settings.worker_heartbeat_timeout.total_seconds()
        self.workers: list[Worker] = []
        self.restarted = 0

    def close(self) -> None:
        for worker in self.workers:
            if worker.pipe >= 0:
                os.close(worker.pipe)
                worker.pipe = -1
            worker.pulse.close()

    async def _start(self, index: int) -> Worker:
        env = {**os.environ, MULTIPROCESS_DIR: str(self.metrics_dir)}
        # Plain pipes, not asyncio's: the stdin write end stays open (its end of file
        # tells the worker the supervisor is gone) and no transport waits on it.
        read_end, write_end = os.pipe()
        beat_read, beat_write = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *WORKER_COMMAND, stdin=read_end, env=env, pass_fds=(beat_write,)
            )
        finally:
            os.close(read_end)
            os.close(beat_write)
        order = pickle.dumps(
            WorkerOrder(
                self.settings,
                index,
                self.count,
                heartbeat_fd=beat_write,
                heartbeat_interval=beat_interval(self.deadline),
            )
        )
        framed = memoryview(len(order).to_bytes(8, "big") + order)
        while framed:
            framed = framed[os.write(write_end, framed) :]
        return Worker(
            index,
            process,
            write_end,
            Pulse(beat_read, self.deadline),
            asyncio.create_task(process.wait()),
        )

    async def _watch(self) -> None:
        """Kill each worker whose heartbeat went silent; ``run`` restarts it."""
        while True:
            await asyncio.sleep(beat_interval(self.deadline))
            for worker in self.workers:
                if worker.hung or worker.process.returncode is not None:
                    continue
                silent = worker.pulse.silent_for()
                if silent is None:
                    continue
                worker.hung = True
                console.print(
                    f"[red]error:[/] {self._name(worker)} sent no heartbeat for "
                    f"{silent:.0f} s (EFFECT_BROKER_WORKER_HEARTBEAT_TIMEOUT is "
                    f"{self.deadline:g} s): its event loop is paused or stuck; killed "
                    "with SIGKILL and restarted"
                )
                worker.process.kill()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        for index in range(1, self.count + 1):
            self.workers.append(await self._start(index))
        stopping = asyncio.create_task(stop.wait())
        watchdog = asyncio.create_task(self._watch())
        failed = False
        try:
            while not failed:
                exits = {worker.exit: worker for worker in self.workers}
                done, _ = await asyncio.wait(
                    [*exits, stopping], return_when=asyncio.FIRST_COMPLETED
                )
                if stopping in done:
                    break
                for task in done:
                    worker = exits[task]
                    if worker.hung and not stop.is_set():
                        await self._replace(worker)
                        continue
                    console.print(
                        f"[red]error:[/] {self._name(worker)} "
                        f"{describe_exit(task.result())} unexpectedly; stopping the "
                        "other workers (not restarting it: whatever runs effect-broker "
                        "restarts it whole)"
                    )
                    failed = True
        finally:
            watchdog.cancel()
        if not failed:
            console.print(f"stopping {self.count} workers")
        stopping.cancel()
        return await self._stop_all(failed)

    async def _replace(self, dead: Worker) -> None:
        """Start a new worker in the place of one killed for a silent heartbeat."""
        if dead.pipe >= 0:
            os.close(dead.pipe)
            dead.pipe = -1
        dead.pulse.close()
        position = self.workers.index(dead)
        self.workers[position] = await self._start(dead.index)
        self.restarted += 1

    async def _stop_all(self, failed: bool) -> int:
        exits = {worker.exit: worker for worker in self.workers}
        for worker in self.workers:
            if worker.process.returncode is None:
                worker.process.send_signal(signal.SIGTERM)
        _, late = await asyncio.wait(exits, timeout=SHUTDOWN_DEADLINE)
        for task in late:
            worker = exits[task]
            console.print(
                f"[red]error:[/] {self._name(worker)} still running "
                f"{SHUTDOWN_DEADLINE:g} s after SIGTERM; killed"
            )
            worker.process.kill()
        if late:
            await asyncio.wait(late)
            failed = True
        unclean = [w for w in self.workers if w.process.returncode != 0]
        if not failed and unclean:
            for worker in unclean:
                code = worker.process.returncode
                console.print(
                    f"[red]error:[/] {self._name(worker)} "
                    f"{describe_exit(code if code is not None else -9)} while stopping"
                )
            failed = True
        return 1 if failed else 0

    def _name(self, worker: Worker) -> str:
        return f"worker {worker.index}/{self.count} (pid {worker.process.pid})"


def metrics_directory() -> tuple[Path, bool]:
    """The directory the workers share metrics through, and whether it is ours to
    remove. One set already is used after its old value files are removed (values of
    an earlier run would otherwise be added to this run's)."""
    given = os.environ.get(MULTIPROCESS_DIR)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        return path, False
    return Path(tempfile.mkdtemp(prefix="effect-broker-metrics-")), True


def supervise(settings: Settings, count: int) -> int:
    """Run ``count`` workers until a signal or a worker's death; the exit status."""
    held: list[socket.socket] = []
    try:
        concrete = {}
        for field in ADDRESS_SETTINGS:
            sock, address = reserve(settings, field)
            held.append(sock)
            concrete[field] = address
        settings = settings.model_copy(update=concrete)
        metrics_dir, ours = metrics_directory()
        console.print(
            f"effect-broker supervisor (pid {os.getpid()}): {count} workers on proxy "
            f"{settings.listen}, admin {settings.admin_listen}"
        )
        supervisor = Supervisor(settings, count, metrics_dir)
        try:
            return asyncio.run(supervisor.run())
        finally:
            supervisor.close()
            if ours:
                shutil.rmtree(metrics_dir, ignore_errors=True)
    finally:
        for sock in held:
            sock.close()
