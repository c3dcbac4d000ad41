"""Load generators, each in a process of its own: wrk when installed, else Python.

Both send the same request: ``POST`` of a small JSON charge with ``Content-Type`` and an
``Operation-Key`` header, in absolute form through a forward proxy (or origin form when
going direct), over keep-alive connections, ``concurrency`` of them at once. Keys are new
on every request (``keys="new"``) or cycle through a few stored ones (``keys="replay"``).

The Python generator (``python -m bench.loadgen SPEC_JSON``) is asyncio + aiohttp with a
connection pool of the concurrency size. It warms up, prints ``warm``, waits for a line
on stdin (the bench samples the proxy's CPU then), measures, and prints
``result {json}``. It measures a fixed duration, or a fixed request count.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from yarl import URL

from bench.procs import ROOT, child_env, python_module

Generator = Literal["wrk", "python"]
BODY = '{"amount": 1, "currency": "usd"}'


@dataclass(frozen=True)
class LoadSpec:
    url: str  # what is requested: the upstream's absolute URL
    proxy: str | None  # forward proxy to send it through; None goes direct
    concurrency: int
    duration: float = 0.0  # seconds measured, or ...
    count: int = 0  # ... this many requests (Python generator only)
    warmup: float = 0.0
    keys: Literal["new", "replay"] = "new"
    replay_keys: tuple[str, ...] = ()
    body: str = BODY


@dataclass(frozen=True)
class LoadResult:
    requests: int  # completed, errors included
    errors: int  # non-2xx answers and failed requests
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def available_generator(wanted: str) -> Generator:
    """``auto`` and ``wrk`` use wrk, installing Debian's package first when it is not on
    PATH; ``auto`` falls back to the Python generator if that cannot be done, asking for
    wrk is an error then."""
    if wanted == "python":
        return "python"
    if shutil.which("wrk") or install_wrk():
        return "wrk"
    if wanted == "wrk":
        raise RuntimeError(
            "--generator wrk, but wrk is not on PATH and apt-get could not install it"
        )
    print(
        "bench: wrk could not be installed; the Python generator drives the load, "
        "and its own CPU moves the ratios",
        file=sys.stderr,
        flush=True,
    )
    return "python"


def install_wrk() -> bool:
    """``apt-get install wrk``, as root or through sudo (as .ci/run installs promtool):
    wrk is the generator whose own CPU does not move the ratios. True when it is on
    PATH afterwards; failures are reported, never raised."""
    if not shutil.which("apt-get"):
        return False
    as_root = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if as_root and not shutil.which("sudo"):
        return False
    print("bench: installing wrk (apt-get install wrk)", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wrk"],
    ):
        try:
            done = subprocess.run(
                [*as_root, *command],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"bench: {' '.join(command)} failed: {exc}", file=sys.stderr)
            return False
        if done.returncode != 0:
            print(
                f"bench: {' '.join(command)} failed:\n{done.stderr[-2000:]}",
                file=sys.stderr,
            )
            return False
    return shutil.which("wrk") is not None


def drive(
    spec: LoadSpec, generator: Generator, on_start: Callable[[], None] = lambda: None
) -> LoadResult:
    """Run one load in its own process; ``on_start`` is called as measuring begins."""
    if generator == "wrk":
        return _run_wrk(spec, on_start)
    return _run_python(spec, on_start)


# -- the Python generator: the parent side --------------------------------------------


def _run_python(spec: LoadSpec, on_start: Callable[[], None]) -> LoadResult:
    command = python_module("bench.loadgen", json.dumps(asdict(spec)))
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    # A hung proxy must not hang the bench: give up well after the load should be done.
    budget = 60 + spec.warmup + spec.duration + spec.count / 50
    watchdog = threading.Timer(budget, process.kill)
    watchdog.start()
    try:
        line = process.stdout.readline()
        if line.strip() == "warm":
            on_start()
            process.stdin.write("go\n")
            process.stdin.flush()
            line = process.stdout.readline()
        _, stderr = process.communicate()
    finally:
        watchdog.cancel()
    if not line.startswith("result "):
        raise RuntimeError(
            f"the load generator failed (exit {process.returncode}):\n{stderr[-3000:]}"
        )
    return LoadResult(**json.loads(line.removeprefix("result ")))


# -- the Python generator: the child side ---------------------------------------------


def _keys(spec: LoadSpec) -> Iterator[str]:
    if spec.keys == "replay":
        return itertools.cycle(spec.replay_keys)
    prefix = uuid.uuid4().hex[:12]
    return (f"bench-{prefix}-{n}" for n in itertools.count())


async def _load(spec: LoadSpec) -> None:
    import aiohttp  # the child process only: the parent never needs it

    keys = _keys(spec)
    body = spec.body.encode()
    url = URL(spec.url)
    connector = aiohttp.TCPConnector(limit=spec.concurrency)
    async with aiohttp.ClientSession(
        connector=connector, skip_auto_headers=("User-Agent", "Accept-Encoding")
    ) as session:

        async def worker(stop: Callable[[], bool], latencies: list[float]) -> int:
            errors = 0
            while not stop():
                headers = {
                    "Content-Type": "application/json",
                    "Operation-Key": next(keys),
                }
                started = time.perf_counter()
                try:
                    async with session.post(
                        url, data=body, headers=headers, proxy=spec.proxy
                    ) as response:
                        await response.read()
                        failed = response.status >= 400
                except aiohttp.ClientError:
                    failed = True
                latencies.append(time.perf_counter() - started)
                errors += failed
            return errors

        async def phase(stop: Callable[[], bool]) -> tuple[list[float], int, float]:
            latencies: list[float] = []
            started = time.perf_counter()
            errors = await asyncio.gather(
                *(worker(stop, latencies) for _ in range(spec.concurrency))
            )
            return latencies, sum(errors), time.perf_counter() - started

        if spec.warmup > 0:
            warm_until = time.perf_counter() + spec.warmup
            await phase(lambda: time.perf_counter() >= warm_until)
        print("warm", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

        if spec.count > 0:
            issued = itertools.count(1)
            latencies, errors, seconds = await phase(lambda: next(issued) > spec.count)
        else:
            until = time.perf_counter() + spec.duration
            latencies, errors, seconds = await phase(lambda: time.perf_counter() >= until)
    latencies.sort()
    result = LoadResult(
        requests=len(latencies),
        errors=errors,
        seconds=seconds,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
    )
    print("result " + json.dumps(asdict(result)), flush=True)


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted list (0.0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# -- wrk ------------------------------------------------------------------------------

_WRK_SCRIPT = """\
-- generated by bench/loadgen.py
local path = {path}
local body = {body}
local host = {host}
local prefix = {prefix}
local keys = {{{keys}}}
local n = 0

function request()
  n = n + 1
  local key
  if #keys > 0 then key = keys[(n % #keys) + 1] else key = prefix .. n end
  return wrk.format("POST", path, {{
    ["Host"] = host,
    ["Content-Type"] = "application/json",
    ["Operation-Key"] = key,
  }}, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKJSON {{\\"requests\\": %d, \\"errors\\": %d, \\"seconds\\": %.6f, " ..
    "\\"p50_ms\\": %.4f, \\"p99_ms\\": %.4f}}\\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000))
end
"""


def _lua_string(text: str) -> str:
    return json.dumps(text)  # ASCII JSON string escapes are valid Lua escapes


def _wrk_script(spec: LoadSpec) -> str:
    url = URL(spec.url)
    path = str(url) if spec.proxy else url.raw_path_qs
    keys = spec.replay_keys if spec.keys == "replay" else ()
    return _WRK_SCRIPT.format(
        path=_lua_string(path),
        body=_lua_string(spec.body),
        host=_lua_string(f"{url.host}:{url.port}"),
        prefix=_lua_string(f"bench-{uuid.uuid4().hex[:12]}-"),
        keys=", ".join(_lua_string(key) for key in keys),
    )


def _wrk(spec: LoadSpec, seconds: float) -> LoadResult:
    target = spec.proxy or str(URL(spec.url).origin())
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_wrk_script(spec))  # a new key prefix for every invocation
    try:
        completed = subprocess.run(
            [
                "wrk",
                "--threads",
                "1",
                "--connections",
                str(spec.concurrency),
                "--duration",
                f"{max(1, round(seconds))}s",
                "--timeout",
                "10s",
                "--script",
                script.name,
                target,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
        )
    finally:
        Path(script.name).unlink()
    for line in completed.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return LoadResult(**json.loads(line.removeprefix("WRKJSON ")))
    raise RuntimeError(f"wrk failed:\n{completed.stdout}\n{completed.stderr}")


def _run_wrk(spec: LoadSpec, on_start: Callable[[], None]) -> LoadResult:
    if spec.count:
        raise ValueError("wrk runs for a duration; use the Python generator for counts")
    if spec.warmup > 0:
        _wrk(spec, spec.warmup)
    on_start()
    return _wrk(spec, spec.duration)


if __name__ == "__main__":
    fields = json.loads(sys.argv[1])
    fields["replay_keys"] = tuple(fields["replay_keys"])
    asyncio.run(_load(LoadSpec(**fields)))
