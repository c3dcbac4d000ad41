"""The bench run: start the processes, check each configuration answers as it should,
drive every (configuration, concurrency) pair ``runs`` times, measure effect-broker's RSS
across many new effects, then report medians (see ``report``)."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiohttp
from yarl import URL

from bench import ledger, reconcile, report, scale, streams
from bench.loadgen import (
    BODY,
    Generator,
    LoadResult,
    LoadSpec,
    available_generator,
    drive,
)
from bench.procs import (
    Server,
    machine_busy_percent,
    machine_cpu_seconds,
    python_module,
    start_server,
)
from bench.serving import READY_PATTERN
from effect_broker.cli.serve import resolved_event_loop

DEFAULT_OUTPUT = Path(__file__).with_name("results.json")
REPLAY_KEYS = 16  # "the same few keys again"
RSS_CHUNKS = 10  # RSS is sampled after each tenth of the effects


@dataclass(frozen=True)
class Config:
    name: str
    label: str
    via: Literal["direct", "bare", "broker", "broker2"]
    path: str = ledger.CHARGE_PATH
    keys: Literal["new", "replay"] = "new"

    @property
    def records(self) -> bool:
        """Whether effect-broker records these requests as effects (a matched route)."""
        return self.via in BROKERS and self.path == ledger.CHARGE_PATH


BROKERS = ("broker", "broker2")  # effect-broker with 1 worker, with 2

CONFIGS = {
    config.name: config
    for config in (
        Config("direct", "direct to upstream", "direct"),
        Config("bare", "bare proxy (baseline)", "bare"),
        Config("new", "effect-broker, new keys", "broker"),
        Config("new_w2", "effect-broker, 2 workers, new keys", "broker2"),
        Config("replay", "effect-broker, replayed keys", "broker", keys="replay"),
        Config(
            "passthrough", "effect-broker, unmatched", "broker", ledger.UNMATCHED_PATH
        ),
    )
}
#: Rounds the ledger-size measurement alternates between its two ledgers.
SIZE_ROUNDS = 4
#: Sections that are not load runs, selected with --configs like the configurations:
#: ``reconcile`` is reconciliation latency (``bench.reconcile``), ``streams`` the time to
#: first byte of a recorded SSE stream (``bench.streams``), each on processes of its own.
SECTIONS = ("reconcile", "streams")


@dataclass
class Options:
    configs: list[str]
    sections: list[str]
    concurrency: list[int]
    runs: int
    duration: float
    warmup: float
    requests: int
    effects: int
    commit_effects: int
    fill: int
    size_effects: int
    reconcile_effects: int
    stream_samples: int
    stream_memory: int
    generator: str
    database_url: str | None
    pg_overrides: dict[str, str]
    broker_command: list[str] | None
    output: Path
    results_md: Path | None
    render: Path | None


@dataclass
class Run:
    result: LoadResult
    proxy_cpu_us: float | None  # proxy CPU time per request, None going direct
    database_cpu_us: float | None  # effect-broker's PostgreSQL backends, per request
    # every core's busy time per request: generator, upstream, database and any other
    # work on the machine; on a quiet machine the price of a request, all included
    machine_cpu_us: float | None = None


@dataclass
class Stack:
    """The running processes and where they listen."""

    upstream: Server
    bare: Server
    broker: ledger.Broker
    broker2: ledger.Broker | None
    database_url: str
    replay_keys: tuple[str, ...] = ()
    rss_at_start: dict[str, int] = field(default_factory=dict)

    @property
    def upstream_url(self) -> str:
        return self.upstream.match.group(1)

    def brokers(self) -> dict[str, ledger.Broker]:
        both = {"broker": self.broker, "broker2": self.broker2}
        return {via: broker for via, broker in both.items() if broker is not None}

    def proxy(self, config: Config) -> Server | None:
        if config.via in BROKERS:
            return self.brokers()[config.via].server
        return {"direct": None, "bare": self.bare}[config.via]

    def proxy_url(self, config: Config) -> str | None:
        if config.via in BROKERS:
            return self.brokers()[config.via].proxy_url
        proxy = self.proxy(config)
        return None if proxy is None else proxy.match.group(1)


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Benchmark effect-broker against a bare aiohttp proxy.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a ~1 minute smoke run: 1 run of 2 s each"
    )
    parser.add_argument(
        "--configs",
        default=",".join([*CONFIGS, *SECTIONS]),
        help=f"comma-separated subset of {', '.join([*CONFIGS, *SECTIONS])} (without "
        "any load configuration, only the named sections run)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--runs", type=int, help="runs per pair (default 3, quick 1)")
    parser.add_argument("--duration", type=float, help="seconds measured per run (4)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up per run (1)")
    parser.add_argument(
        "--requests",
        type=int,
        default=0,
        help="a fixed request count per run instead of a duration (Python generator)",
    )
    parser.add_argument(
        "--effects",
        type=int,
        help="new effects for the RSS measurement (default 100000, quick 5000; 0 skips)",
    )
    parser.add_argument(
        "--commit-effects",
        type=int,
        help="new effects at c=1 (4x at c=64) counted for commits per effect "
        "(default 2000, quick 300; 0 skips)",
    )
    parser.add_argument(
        "--fill",
        type=int,
        help="settled effects written into a second ledger to time writes on a large "
        "ledger (default 1000000, quick 100000; 0 skips)",
    )
    parser.add_argument(
        "--size-effects",
        type=int,
        help="new effects at c=1 timed on that ledger, empty and filled (default 2000, "
        "quick 500)",
    )
    parser.add_argument(
        "--reconcile-effects",
        type=int,
        help="effects per safety class whose answers are lost, for reconciliation "
        "latency (default 500, quick 50; 0 skips)",
    )
    parser.add_argument(
        "--stream-samples",
        type=int,
        help="requests of each kind (direct, new effect, replay) timed to their first "
        "byte of an SSE stream (default 100, quick 20; 0 skips)",
    )
    parser.add_argument(
        "--stream-memory",
        type=int,
        help="recorded 1 MiB streams run at once while effect-broker's RSS is sampled "
        "(default 200, quick 50; 0 skips)",
    )
    parser.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server DSN; the bench creates and drops its own database "
        "there (default: the system server on 127.0.0.1:5432, else an embedded one)",
    )
    parser.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an experiment only: a setting for the bench database, e.g. "
        "synchronous_commit=off (recorded in the results)",
    )
    parser.add_argument(
        "--broker-command",
        help="how to start effect-broker instead of this environment's `effect-broker` "
        "(`serve` is appended), e.g. another checkout's .venv/bin/effect-broker",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="run nothing: print the tables of an earlier results.json",
    )
    parser.add_argument(
        "--results-md", type=Path, help="also write the table to this markdown file"
    )
    args = parser.parse_args(argv)
    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = set(configs) - set(CONFIGS) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    if any(c < 1 for c in args.concurrency):
        parser.error("--concurrency values must be at least 1")
    overrides = dict(item.partition("=")[::2] for item in args.pg_set)
    if any(not name or not value for name, value in overrides.items()):
        parser.error("--pg-set takes NAME=VALUE")
    quick = args.quick
    effects = args.effects if args.effects is not None else 5000 if quick else 100_000
    return Options(
        configs=[name for name in configs if name in CONFIGS],
        sections=[name for name in configs if name in SECTIONS],
        concurrency=sorted(set(args.concurrency)),
        runs=args.runs or (1 if quick else 3),
        duration=args.duration or (2.0 if quick else 4.0),
        warmup=args.warmup if args.warmup is not None else (0.5 if quick else 1.0),
        requests=args.requests,
        effects=effects,
        commit_effects=_given(args.commit_effects, 300 if quick else 2000),
        fill=_given(args.fill, 100_000 if quick else 1_000_000),
        size_effects=_given(args.size_effects, 500 if quick else 2000),
        reconcile_effects=_given(args.reconcile_effects, 50 if quick else 500),
        stream_samples=_given(args.stream_samples, 20 if quick else 100),
        stream_memory=_given(args.stream_memory, 50 if quick else 200),
        generator=args.generator,
        database_url=args.database_url,
        pg_overrides=overrides,
        broker_command=shlex.split(args.broker_command) if args.broker_command else None,
        output=args.output,
        results_md=args.results_md,
        render=args.render,
    )


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- answers are checked before anything is timed ---------------------------------------


def send_one(
    upstream: str, path: str, proxy: str | None, key: str
) -> http.client.HTTPResponse:
    """One request exactly as the load generators send it; the body is read."""
    target = URL(proxy or upstream)
    conn = http.client.HTTPConnection(target.host or "", target.port, timeout=15)
    url = upstream.rstrip("/") + path if proxy else path
    conn.request(
        "POST",
        url,
        body=BODY,
        headers={"Content-Type": "application/json", "Operation-Key": key},
    )
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def check_answers(stack: Stack, configs: Sequence[Config]) -> None:
    """Each configuration must answer like it claims to, or the numbers mean nothing."""
    for config in configs:
        key = f"check-{uuid.uuid4().hex}"
        proxy = stack.proxy_url(config)
        first = send_one(stack.upstream_url, config.path, proxy, key)
        problems = []
        if first.status != 200:
            problems.append(f"status {first.status}")
        recorded = first.getheader("Effect-Status")
        if config.records:
            if recorded != "succeeded":
                problems.append(f"Effect-Status {recorded!r}, expected 'succeeded'")
            again = send_one(stack.upstream_url, config.path, proxy, key)
            if again.getheader("Idempotent-Replayed") != "true":
                problems.append("the same key again was not a replay")
        elif recorded not in (None, "unrecorded"):
            problems.append(f"Effect-Status {recorded!r} on a request nobody records")
        if problems:
            raise RuntimeError(f"{config.label} answers wrongly: {'; '.join(problems)}")


def seed_replay_keys(stack: Stack) -> tuple[str, ...]:
    keys = tuple(f"replay-{uuid.uuid4().hex[:8]}-{n}" for n in range(REPLAY_KEYS))
    for key in keys:
        response = send_one(
            stack.upstream_url, ledger.CHARGE_PATH, stack.broker.proxy_url, key
        )
        if response.status != 200:
            raise RuntimeError(f"seeding replay key {key} answered {response.status}")
    return keys


# -- measuring -------------------------------------------------------------------------


def measure(
    stack: Stack, config: Config, concurrency: int, options: Options, gen: Generator
) -> Run:
    spec = LoadSpec(
        url=stack.upstream_url.rstrip("/") + config.path,
        proxy=stack.proxy_url(config),
        concurrency=concurrency,
        duration=0.0 if options.requests else options.duration,
        count=options.requests,
        warmup=options.warmup,
        keys=config.keys,
        replay_keys=stack.replay_keys if config.keys == "replay" else (),
    )
    proxy = stack.proxy(config)
    proxy_cpu = 0.0
    db_cpu: dict[int, float] | None = None
    machine_cpu = 0.0
    database = stack.database_url if config.via in BROKERS else None

    def started() -> None:
        nonlocal proxy_cpu, db_cpu, machine_cpu
        machine_cpu = machine_cpu_seconds()
        proxy_cpu = proxy.cpu_seconds() if proxy else 0.0
        db_cpu = ledger.database_cpu_seconds(database) if database else None

    result = drive(spec, gen, on_start=started)
    machine_spent = machine_cpu_seconds() - machine_cpu
    run = Run(result, None, None)
    if result.requests:
        run.machine_cpu_us = machine_spent / result.requests * 1e6
    if result.requests and proxy is not None:
        run.proxy_cpu_us = (proxy.cpu_seconds() - proxy_cpu) / result.requests * 1e6
    if result.requests and database and db_cpu is not None:
        after = ledger.database_cpu_seconds(database) or {}
        spent = sum(cpu - db_cpu.get(pid, 0.0) for pid, cpu in after.items())
        run.database_cpu_us = spent / result.requests * 1e6
    return run


def measure_rss(stack: Stack, effects: int, generator: Generator) -> dict[str, Any]:
    """effect-broker's RSS before and after at least ``effects`` new effects at
    concurrency 64, sampled after every tenth. The Python generator stops after a
    count; wrk runs for a duration, sized from the rate measured so far."""
    server = stack.broker.server
    before = server.rss_kib()
    samples = []
    chunk = max(1, effects // RSS_CHUNKS)
    done = 0
    rate = 0.0  # new effects per second so far; wrk's first chunk runs 2 s to learn it
    started = time.perf_counter()
    while done < effects:
        wanted = min(chunk, effects - done)
        spec = LoadSpec(
            url=stack.upstream_url.rstrip("/") + ledger.CHARGE_PATH,
            proxy=stack.broker.proxy_url,
            concurrency=64,
            count=0 if generator == "wrk" else wanted,
            duration=max(1.0, wanted / rate) if rate else 2.0,
        )
        result = drive(spec, generator)
        if result.errors:
            raise RuntimeError(f"{result.errors} of {result.requests} new effects failed")
        done += result.requests
        rate = done / (time.perf_counter() - started)
        samples.append({"effects": done, "rss_kib": server.rss_kib()})
        say(f"  {done:>7,} effects: RSS {samples[-1]['rss_kib'] / 1024:.1f} MiB")
    seconds = time.perf_counter() - started
    after = samples[-1]["rss_kib"] if samples else before
    return {
        "effects": done,
        "at_start_kib": stack.rss_at_start["effect-broker"],
        "before_kib": before,
        "after_kib": after,
        "growth_pct": (after - before) / before * 100,
        "effects_per_s": done / seconds,
        "samples": samples,
    }


# -- the run ---------------------------------------------------------------------------


def machine(postgres: ledger.PostgresInfo, generator: Generator) -> dict[str, Any]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "postgres": postgres.version,
        "postgres_server": postgres.origin,
        "postgres_fsync": postgres.fsync,
        "postgres_synchronous_commit": postgres.synchronous_commit,
        "kernel": platform.release(),
        "aiohttp": aiohttp.__version__,
        "event_loop": resolved_event_loop(),
        "generator": generator,
        "load_average_at_start": list(os.getloadavg()),
        "cpu_busy_before_start_pct": machine_busy_percent(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def start_stack(
    stack: ExitStack, workdir: Path, database_url: str, options: Options
) -> Stack:
    upstream = start_server(
        "upstream",
        python_module("bench.upstream"),
        log=workdir / "upstream.log",
        ready=_ready(),
    )
    stack.callback(upstream.stop)
    bare = start_server(
        "bare proxy",
        python_module("bench.bare_proxy"),
        log=workdir / "bare_proxy.log",
        ready=_ready(),
    )
    stack.callback(bare.stop)
    routes = ledger.write_routes(upstream.match.group(1), workdir / "routes.yaml")
    broker = ledger.start_broker(
        database_url, routes, workdir / "effect-broker.log", options.broker_command
    )
    stack.callback(broker.server.stop)
    broker2 = None
    if "new_w2" in options.configs:
        broker2 = ledger.start_broker(
            database_url,
            routes,
            workdir / "effect-broker-2.log",
            options.broker_command,
            workers=2,
        )
        stack.callback(broker2.server.stop)
    return Stack(
        upstream,
        bare,
        broker,
        broker2,
        database_url,
        rss_at_start={
            "bare proxy": bare.rss_kib(),
            "effect-broker": broker.server.rss_kib(),
        },
    )


def _ready() -> re.Pattern[str]:
    return re.compile(READY_PATTERN)


def run(options: Options) -> dict[str, Any]:
    generator: Generator = (
        "python" if options.requests else available_generator(options.generator)
    )
    configs = [CONFIGS[name] for name in options.configs]
    with ExitStack() as stack:
        workdir = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="eb-bench-"))
        )
        postgres = stack.enter_context(
            ledger.postgres_server(options.database_url, workdir)
        )
        info = machine(postgres, generator)
        say(
            f"effect-broker bench: {info['cpu_model']}, {info['cores']} cores, Python "
            f"{info['python']}, PostgreSQL {info['postgres']} ({postgres.origin}), "
            f"generator {generator}"
        )
        measured: dict[str, Any] = {
            "runs": {},
            "rss": None,
            "scale": None,
            "rss_by_process": {},
        }
        if configs:
            with ExitStack() as load:  # its processes stop before the next section
                measured = measure_load(load, workdir, postgres, options, generator)
        reconciliation = None
        if "reconcile" in options.sections and options.reconcile_effects > 0:
            reconciliation = reconcile.measure(
                postgres, workdir, options.reconcile_effects, options.broker_command
            )
        stream_ttfb = None
        if "streams" in options.sections and options.stream_samples > 0:
            say(
                f"streams: time to first byte, {options.stream_samples} requests each "
                "direct, new effect and replay"
            )
            stream_ttfb = streams.measure(
                postgres,
                workdir,
                options.stream_samples,
                options.broker_command,
                memory_streams=options.stream_memory,
            )
        return report.build(
            machine=info,
            settings={
                "runs": options.runs,
                "duration_s": None if options.requests else options.duration,
                "requests_per_run": options.requests or None,
                "warmup_s": options.warmup,
                "concurrency": options.concurrency,
                "generator": generator,
                "postgres_overrides": options.pg_overrides,
                "broker_command": options.broker_command,
                "request": f"POST {ledger.CHARGE_PATH} (unmatched: "
                f"{ledger.UNMATCHED_PATH}), JSON body {BODY}, absolute form via "
                "the proxy",
            },
            labels={config.name: config.label for config in configs},
            reconcile=reconciliation,
            streams=stream_ttfb,
            **measured,
        )


def measure_load(
    stack: ExitStack,
    workdir: Path,
    postgres: ledger.PostgresInfo,
    options: Options,
    generator: Generator,
) -> dict[str, Any]:
    """The load configurations: start their processes on ``stack``, check their
    answers, drive every (configuration, concurrency) pair, then RSS and scale."""
    configs = [CONFIGS[name] for name in options.configs]
    pairs = [(config, c) for c in options.concurrency for config in configs]
    database_url = stack.enter_context(
        ledger.bench_database(
            postgres, options.pg_overrides, command=options.broker_command
        )
    )
    processes = start_stack(stack, workdir, database_url, options)
    say(
        f"pids: upstream {processes.upstream.pid}, bare proxy {processes.bare.pid}, "
        f"effect-broker {processes.broker.server.pid} ({processes.broker.proxy_url})"
    )
    check_answers(processes, configs)
    if any(config.keys == "replay" for config in configs):
        processes.replay_keys = seed_replay_keys(processes)

    runs: dict[tuple[str, int], list[Run]] = {(cf.name, c): [] for cf, c in pairs}
    total = len(pairs) * options.runs
    step = 0
    for round_no in range(1, options.runs + 1):  # interleaved: drift hits all alike
        for config, concurrency in pairs:
            step += 1
            measured = measure(processes, config, concurrency, options, generator)
            runs[(config.name, concurrency)].append(measured)
            say(_progress(step, total, config, concurrency, round_no, measured))

    rss = None
    if options.effects > 0:
        say(f"RSS: {options.effects:,} new effects through effect-broker (c=64)")
        rss = measure_rss(processes, options.effects, generator)
    scale = measure_scale(processes, postgres, workdir, options)
    rss_at_end = {
        "bare proxy": processes.bare.rss_kib(),
        "effect-broker": processes.broker.server.rss_kib(),
    }
    return {
        "runs": {
            pair: [_run_json(run) for run in measured] for pair, measured in runs.items()
        },
        "rss": rss,
        "scale": scale,
        "rss_by_process": {"at_start": processes.rss_at_start, "at_end": rss_at_end},
    }


def measure_scale(
    stack: Stack, postgres: ledger.PostgresInfo, workdir: Path, options: Options
) -> dict[str, Any]:
    """Commits per new effect (each effect-broker, c=1 and c=64), then new effects on
    an empty ledger and on one with ``options.fill`` settled effects (``bench.scale``)."""
    found: dict[str, Any] = {"commits": {}, "ledger_size": None}
    if options.commit_effects > 0:
        for via, broker in stack.brokers().items():
            workers = 2 if via == "broker2" else 1
            for concurrency, count in (
                (1, options.commit_effects),
                (64, options.commit_effects * 4),
            ):
                say(f"commits per new effect: {workers} worker(s), c={concurrency}")
                measured = scale.per_effect(
                    stack.database_url,
                    stack.upstream_url,
                    broker.proxy_url,
                    concurrency,
                    count,
                )
                found["commits"][f"{workers}/{concurrency}"] = {
                    "workers": workers,
                    "concurrency": concurrency,
                    **measured,
                }
    if options.fill > 0:
        found["ledger_size"] = _ledger_size(stack, postgres, workdir, options)
    return found


def _ledger_size(
    stack: Stack, postgres: ledger.PostgresInfo, workdir: Path, options: Options
) -> dict[str, Any]:
    """New effects at c=1 on an empty ledger and on one holding ``options.fill``
    settled effects, each with an effect-broker of its own, taken in alternating
    rounds so that the machine's drift over the minute this takes hits both alike."""
    with (
        ledger.bench_database(postgres) as empty_dsn,
        ledger.bench_database(postgres) as full_dsn,
    ):
        say(f"write cost: writing {options.fill:,} settled effects")
        seconds = scale.fill(full_dsn, options.fill)
        ledgers = {"empty": empty_dsn, "full": full_dsn}
        rows = {name: scale.ledger_rows(dsn) for name, dsn in ledgers.items()}
        routes = workdir / "routes.yaml"
        brokers = {
            name: ledger.start_broker(
                dsn,
                routes,
                workdir / f"effect-broker-{name}-ledger.log",
                options.broker_command,
            )
            for name, dsn in ledgers.items()
        }
        try:
            say(
                f"write cost: {options.size_effects:,} new effects on each ledger, "
                f"in {SIZE_ROUNDS} alternating rounds"
            )
            measured = scale.p50_at_c1_alternating(
                stack.upstream_url,
                {name: broker.proxy_url for name, broker in brokers.items()},
                options.size_effects,
                rounds=SIZE_ROUNDS,
            )
        finally:
            for broker in brokers.values():
                broker.server.stop()
    empty = {**measured["empty"], "ledger_effects": rows["empty"]}
    full = {**measured["full"], "ledger_effects": rows["full"]}
    return {
        "fill": options.fill,
        "fill_seconds": seconds,
        "rounds": SIZE_ROUNDS,
        "empty": empty,
        "full": full,
        "p50_ratio": full["p50_ms"] / empty["p50_ms"] if empty["p50_ms"] else None,
    }


def _run_json(run: Run) -> dict[str, Any]:
    result = run.result
    return {
        "rps": result.rps,
        "p50_ms": result.p50_ms,
        "p99_ms": result.p99_ms,
        "requests": result.requests,
        "errors": result.errors,
        "seconds": result.seconds,
        "proxy_cpu_us_per_request": run.proxy_cpu_us,
        "database_cpu_us_per_request": run.database_cpu_us,
        "machine_cpu_us_per_request": run.machine_cpu_us,
    }


def _progress(
    step: int, total: int, config: Config, concurrency: int, round_no: int, run: Run
) -> str:
    result = run.result
    cpu = f", proxy CPU {run.proxy_cpu_us:.0f} µs/req" if run.proxy_cpu_us else ""
    if run.database_cpu_us:
        cpu += f", database CPU {run.database_cpu_us:.0f} µs/req"
    if run.machine_cpu_us:
        cpu += f", machine CPU {run.machine_cpu_us:.0f} µs/req"
    errors = f", {result.errors} ERRORS" if result.errors else ""
    return (
        f"[{step:>2}/{total}] {config.label:<30} c={concurrency:<3} run {round_no}: "
        f"{result.rps:>8,.0f} req/s, p50 {result.p50_ms:.2f} ms, "
        f"p99 {result.p99_ms:.2f} ms{cpu}{errors}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    if options.render:  # only print (and write) the tables of an earlier run
        results = report.rejudged(json.loads(options.render.read_text()))
    else:
        started = time.monotonic()
        try:
            results = run(options)
        except (RuntimeError, OSError, ValueError) as exc:
            say(f"bench failed: {exc}")
            return 1
        options.output.parent.mkdir(parents=True, exist_ok=True)
        options.output.write_text(json.dumps(results, indent=2) + "\n")
        say(f"wrote {options.output} in {time.monotonic() - started:.0f} s")
    table = report.render(results)
    print(table)
    if options.results_md:
        options.results_md.write_text(report.markdown_page(results, table))
    return 0
