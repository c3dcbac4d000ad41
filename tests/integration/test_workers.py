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
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

from tests.integration.harness import request, serve_handler
from tests.integration.workers_support import (
    CHARGE,
    DEADLINE,
    alive,
    serving,
)
from tests.support import poll


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

        await poll(
            both_admins,
            within=DEADLINE,
            every=0.05,
            what="/healthz answer from each worker",
        )

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

        await poll(
            both_proxies,
            within=DEADLINE,
            every=0.05,
            what="effects dispatched by each worker",
        )

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

        await poll(all_gone, within=DEADLINE, every=0.05, what="every worker gone")

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

        await poll(
            survivor_gone, within=DEADLINE, every=0.05, what="the other worker stopped"
        )
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

        await poll(
            replaced,
            within=DEADLINE,
            every=0.05,
            what="the paused worker killed and a new one started",
        )
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

        await poll(
            both_answer,
            within=DEADLINE,
            every=0.05,
            what="/healthz from the new worker and the other",
        )
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

        await poll(
            orphans_gone, within=DEADLINE, every=0.05, what="the orphaned workers stopped"
        )


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
