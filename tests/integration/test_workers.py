"""``serve --workers N``: real processes sharing the proxy and admin ports.

Two workers answer on one proxy port and one admin port from two pids (the ledger's
attempt rows name the worker that dispatched, ``/healthz`` names the one that answered),
an operation key sent through both is one effect, ``/metrics`` adds both workers up,
SIGTERM stops everything with status 0, a worker killed with SIGKILL brings the rest
down with status 1, and a supervisor killed with SIGKILL leaves no worker serving.
Everything waits by polling with a deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

from effect_broker.crypto import MasterKey
from tests.integration.harness import request, serve_handler

DEADLINE = 30.0
SUPERVISOR = re.compile(r"(\d+) workers on proxy (\S+), admin (\S+)")
WORKER = re.compile(r"worker (\d+)/(\d+) \(pid (\d+)\): effect-broker proxy on")
ROUTES = """\
version: 1
contracts:
  - name: payments.charge
    version: "1"
    safety: idempotent
    idempotency_header: Idempotency-Key
    key_retention: 1h
    timeout: 5s
routes:
  - name: charges
    match: {{method: POST, path: /pay/v1/charges}}
    strip_prefix: /pay
    upstream: {upstream}
    contract: payments.charge
"""
CHARGE = {"Content-Type": "application/json"}


@dataclass
class Served:
    """A running ``serve --workers N``: the supervisor, its workers, what it printed."""

    process: asyncio.subprocess.Process
    proxy: str = ""
    admin: str = ""
    workers: dict[int, int] = field(default_factory=dict)  # pid -> index
    lines: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), DEADLINE)


async def until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await check():
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE:g} s"
        await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) no longer serves.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@asynccontextmanager
async def serving(
    database_url: str,
    tmp_path: Path,
    upstream: str,
    workers: str = "2",
    *,
    routes_text: str | None = None,
    settings: dict[str, str] | None = None,
) -> AsyncIterator[Served]:
    """``serve --workers``; its routes are ``routes_text`` when given, else one plain
    HTTP route to ``upstream``."""
    routes = tmp_path / "routes.yaml"
    routes.write_text(routes_text or ROUTES.format(upstream=upstream))
    env = {
        **os.environ,
        "EFFECT_BROKER_DATABASE_URL": database_url,
        "EFFECT_BROKER_MASTER_KEY": MasterKey.generate().to_base64(),
        "EFFECT_BROKER_ROUTES": str(routes),
        "EFFECT_BROKER_LISTEN": "127.0.0.1:0",
        "EFFECT_BROKER_ADMIN_LISTEN": "127.0.0.1:0",
        "COLUMNS": "400",
        **(settings or {}),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from effect_broker.cli import main; main()",
        "serve",
        "--workers",
        workers,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    served = Served(process)

    async def read() -> None:
        assert process.stderr is not None
        while line := (await process.stderr.readline()).decode():
            served.lines.append(line.rstrip("\n"))
            if found := SUPERVISOR.search(line):
                served.proxy, served.admin = (f"http://{a}" for a in found.groups()[1:])
            if found := WORKER.search(line):
                served.workers[int(found[3])] = int(found[1])

    reader = asyncio.create_task(read())
    try:

        async def ready() -> bool:
            assert process.returncode is None, served.stderr
            return len(served.workers) == int(workers)

        await until("a start line from each worker", ready)
        yield served
    finally:
        if process.returncode is None:
            process.kill()
        # Before waiting: asyncio's wait() also waits for the stderr pipe, which a
        # worker left behind (a paused one, say) would hold open for ever.
        for pid in served.workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(process.wait(), DEADLINE)
        await asyncio.wait_for(reader, DEADLINE)


class Upstream:
    """Counts what reaches the target, per idempotency key."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.keys.append(request.headers.get("Idempotency-Key", ""))
        return web.json_response({"id": f"ch_{len(self.keys)}"}, status=201)


async def dispatching_pids(database_url: str) -> set[int]:
    """The pids named by attempt owners (``proxy@host:pid:suffix``)."""
    conn = await asyncpg.connect(database_url)
    try:
        owners = await conn.fetch("SELECT DISTINCT owner FROM effect_attempts")
    finally:
        await conn.close()
    return {int(row["owner"].split(":")[-2]) for row in owners}


def metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics:\n{text}")


async def test_two_workers_share_both_ports_record_once_and_stop_on_sigterm(
    database_url: str, tmp_path: Path
) -> None:
    target = Upstream()
    async with (
        serve_handler(target.handle) as upstream,
        serving(database_url, tmp_path, upstream) as served,
    ):
        pids = set(served.workers)
        # The admin port: each request a fresh connection, spread by the kernel.
        answered: set[int] = set()

        async def both_admins() -> bool:
            answer = await request("GET", f"{served.admin}/healthz")
            answered.add(answer.json["pid"])
            return answered == pids

        await until("/healthz answer from each worker", both_admins)

        # The proxy port: new effects until each worker has dispatched some.
        sent = 0

        async def both_proxies() -> bool:
            nonlocal sent
            sent += 1
            answer = await request(
                "POST",
                f"{served.proxy}/pay/v1/charges",
                headers={**CHARGE, "Operation-Key": f"order-{sent}"},
                data=b'{"amount": 1}',
            )
            assert answer.status == 201, answer
            return await dispatching_pids(database_url) == pids

        await until("effects dispatched by each worker", both_proxies)

        # One key sent at once on many connections (so through both workers): one
        # effect, one request upstream, the same receipt for every answer.
        same = await asyncio.gather(
            *(
                request(
                    "POST",
                    f"{served.proxy}/pay/v1/charges",
                    headers={**CHARGE, "Operation-Key": "order-shared"},
                    data=b'{"amount": 2}',
                )
                for _ in range(16)
            )
        )
        settled = [a for a in same if a.status == 201]
        assert settled and all(a.status in (201, 409) for a in same), same
        assert {a.body for a in settled} == {settled[0].body}

        # The counters of both workers, summed, in one scrape of either.
        scrape = await request("GET", f"{served.admin}/metrics")
        succeeded = 'effect_broker_effects_total{outcome="succeeded",route="charges"}'
        assert metric(scrape.body.decode(), succeeded) == sent + 1

        served.process.send_signal(signal.SIGTERM)
        assert await served.exit_code() == 0, served.stderr

        async def all_gone() -> bool:
            return not any(alive(pid) for pid in pids)

        await until("every worker gone", all_gone)

    assert len(target.keys) == sent + 1
    assert len(set(target.keys)) == sent + 1
    assert "stopping 2 workers" in served.stderr


async def test_a_worker_killed_stops_the_others_and_the_supervisor_fails(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        serve_handler(Upstream().handle) as upstream,
        serving(database_url, tmp_path, upstream) as served,
    ):
        victim, survivor = sorted(served.workers)
        os.kill(victim, signal.SIGKILL)

        assert await served.exit_code() == 1

        async def survivor_gone() -> bool:
            return not alive(survivor)

        await until("the other worker stopped", survivor_gone)
    index = served.workers[victim]
    assert f"worker {index}/2 (pid {victim}) killed by SIGKILL unexpectedly" in (
        served.stderr
    )


async def test_a_paused_worker_is_killed_and_restarted_once_its_heartbeat_stops(
    database_url: str, tmp_path: Path
) -> None:
    target = Upstream()
    async with (
        serve_handler(target.handle) as upstream,
        serving(
            database_url,
            tmp_path,
            upstream,
            settings={"EFFECT_BROKER_WORKER_HEARTBEAT_TIMEOUT": "2s"},
        ) as served,
    ):
        paused, other = sorted(served.workers)
        index = served.workers[paused]
        os.kill(paused, signal.SIGSTOP)  # the process stays, its loop stops

        async def replaced() -> bool:
            assert served.process.returncode is None, served.stderr
            return len(served.workers) == 3 and not alive(paused)

        await until("the paused worker killed and a new one started", replaced)
        [fresh] = set(served.workers) - {paused, other}
        assert served.workers[fresh] == index
        assert alive(other)
        silent = [line for line in served.lines if "sent no heartbeat" in line]
        assert len(silent) == 1, served.stderr
        assert f"worker {index}/2 (pid {paused})" in silent[0]
        assert "restarted" in silent[0]

        # Both workers serve: each answers /healthz, new effects still go through.
        answered: set[int] = set()

        async def both_answer() -> bool:
            answer = await request("GET", f"{served.admin}/healthz")
            answered.add(answer.json["pid"])
            return answered == {fresh, other}

        await until("/healthz from the new worker and the other", both_answer)
        for n in range(4):
            answer = await request(
                "POST",
                f"{served.proxy}/pay/v1/charges",
                headers={**CHARGE, "Operation-Key": f"after-{n}"},
                data=b'{"amount": 1}',
            )
            assert answer.status == 201, answer

        served.process.send_signal(signal.SIGTERM)
        assert await served.exit_code() == 0, served.stderr
    assert len([line for line in served.lines if "sent no heartbeat" in line]) == 1


async def test_a_killed_supervisor_leaves_no_worker_serving(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        serve_handler(Upstream().handle) as upstream,
        serving(database_url, tmp_path, upstream) as served,
    ):
        served.process.kill()
        await served.exit_code()

        async def orphans_gone() -> bool:
            return not any(alive(pid) for pid in served.workers)

        await until("the orphaned workers stopped", orphans_gone)


@pytest.mark.parametrize(
    ("value", "flag"), [("0", True), ("abc", True), ("-1", False), ("1.5", False)]
)
def test_a_bad_number_of_workers_is_refused_by_name(
    value: str, flag: bool, tmp_path: Path
) -> None:
    main = [sys.executable, "-c", "from effect_broker.cli import main; main()", "serve"]
    result = subprocess.run(
        [*main, "--workers", value] if flag else main,
        env={
            **os.environ,
            "COLUMNS": "400",
            **({} if flag else {"EFFECT_BROKER_WORKERS": value}),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert f"{value!r} is not a number of workers" in result.stderr
    assert "whole number from 1, or auto" in result.stderr
