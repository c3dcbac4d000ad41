"""Medians, ratios against the bare proxy, goals, and the tables a person reads.

``results.json`` shape (``build``)::

    machine   cpu_model, cores, python, postgres, ...
    settings  runs, duration_s, concurrency, generator, ...
    results   {configuration: {concurrency: {rps, p50_ms, p99_ms, ... , runs: [...]}}}
    ratios    new_vs_bare, replay_vs_bare, passthrough_vs_bare (req/s at the highest
              concurrency), added_p50_ms_c1 (new effects minus bare proxy), and the
              same per concurrency under by_concurrency
    rss       effect-broker VmRSS before/after the effects and growth_pct
    scale     commits {"workers/concurrency": {commits_per_effect, statements_per_effect}}
              and ledger_size {fill, rounds, empty, full: {p50_ms, ...}, p50_ratio}
    reconcile effects (per class), timeout_ms, settlement_bound_ms, lease_grace_ms,
              reconciler {batch, idle_s}, classes {safety: {lost, settled, lost_again,
              from_dispatch / from_loss / loss_to_claim: {p50_s, max_s}, bound, ...}}
    goals     {name: {value, target, met}}
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

GOALS: tuple[tuple[str, str, str, float], ...] = (
    # (key, what, comparison, target); ratios are req/s against the bare proxy
    ("new_vs_bare", "new effects / bare proxy", ">=", 0.50),
    ("new_w2_vs_bare", "new effects, 2 workers / bare proxy", ">=", 0.50),
    ("replay_vs_bare", "replays / bare proxy", ">=", 1.2),
    ("passthrough_vs_bare", "pass-through / bare proxy", ">=", 0.95),
    ("added_p50_ms_c1", "added p50 at c=1, new effects", "<=", 1.0),
    (
        "new_cpu_vs_bare",
        "machine CPU per new effect / per bare proxied request",
        "<=",
        2.0,
    ),
    ("rss_growth_pct", "RSS growth across the effects", "<", 20.0),
    ("ledger_size_ratio", "new effect p50 at c=1, full / empty ledger", "<=", 1.3),
    ("stream_added_ttfb_ms", "recorded SSE stream TTFB - direct TTFB, ms", "<=", 3.0),
    (
        "stream_rss_growth_pct",
        "RSS while recorded 1 MiB streams run at once, ¼ of the bytes → all",
        "<=",
        10.0,
    ),
)
_RATIOS = {  # ratio key -> configuration compared with the bare proxy
    "new_vs_bare": "new",
    "new_w2_vs_bare": "new_w2",
    "replay_vs_bare": "replay",
    "passthrough_vs_bare": "passthrough",
}
_SYMBOL = {">=": "≥", "<=": "≤", "<": "<"}


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of one (configuration, concurrency) pair."""
    return {
        "rps": _median([run["rps"] for run in runs]),
        "p50_ms": _median([run["p50_ms"] for run in runs]),
        "p99_ms": _median([run["p99_ms"] for run in runs]),
        "proxy_cpu_us_per_request": _median(
            [run["proxy_cpu_us_per_request"] for run in runs]
        ),
        "database_cpu_us_per_request": _median(
            [run["database_cpu_us_per_request"] for run in runs]
        ),
        # absent from results written before the bench measured it
        "machine_cpu_us_per_request": _median(
            [run.get("machine_cpu_us_per_request") for run in runs]
        ),
        "errors": sum(run["errors"] for run in runs),
        "requests": sum(run["requests"] for run in runs),
        "runs": list(runs),
    }


def _get(results: Mapping[str, Any], config: str, concurrency: int, key: str) -> Any:
    return results.get(config, {}).get(str(concurrency), {}).get(key)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def ratios(results: Mapping[str, Any], concurrency: Sequence[int]) -> dict[str, Any]:
    by_concurrency = {
        str(c): {
            **{
                key: _ratio(
                    _get(results, config, c, "rps"), _get(results, "bare", c, "rps")
                )
                for key, config in _RATIOS.items()
            },
            **{
                f"added_p50_ms_{config}": _minus(
                    _get(results, config, c, "p50_ms"), _get(results, "bare", c, "p50_ms")
                )
                for config in _RATIOS.values()
            },
        }
        for c in concurrency
    }
    top = str(max(concurrency))
    c1 = by_concurrency.get("1", {})
    cpu = "machine_cpu_us_per_request"
    return {
        **{key: by_concurrency[top][key] for key in _RATIOS},
        "added_p50_ms_c1": c1.get("added_p50_ms_new"),
        # the price of a durable effect in the machine's CPU, whoever spends it
        "new_cpu_vs_bare": _ratio(
            _get(results, "new", int(top), cpu), _get(results, "bare", int(top), cpu)
        ),
        "concurrency": int(top),
        "by_concurrency": by_concurrency,
    }


def _met(value: float | None, comparison: str, target: float) -> bool | None:
    if value is None:
        return None
    if comparison == ">=":
        return value >= target
    if comparison == "<=":
        return value <= target
    return value < target


def build(
    *,
    machine: Mapping[str, Any],
    settings: Mapping[str, Any],
    labels: Mapping[str, str],
    runs: Mapping[tuple[str, int], Sequence[Mapping[str, Any]]],
    rss: Mapping[str, Any] | None,
    rss_by_process: Mapping[str, Any],
    scale: Mapping[str, Any] | None = None,
    reconcile: Mapping[str, Any] | None = None,
    streams: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for (config, concurrency), measured in runs.items():
        results.setdefault(config, {"label": labels[config]})[str(concurrency)] = (
            summarize(measured)
        )
    ratio = ratios(results, settings["concurrency"])
    return {
        "machine": dict(machine),
        "settings": dict(settings),
        "results": results,
        "ratios": ratio,
        "rss": dict(rss) if rss else None,
        "scale": dict(scale) if scale else None,
        "reconcile": dict(reconcile) if reconcile else None,
        "streams": dict(streams) if streams else None,
        "rss_by_process_kib": dict(rss_by_process),
        "goals": judged(ratio, rss, scale, streams),
    }


def judged(
    ratio: Mapping[str, Any],
    rss: Mapping[str, Any] | None,
    scale: Mapping[str, Any] | None,
    streams: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Each goal of ``GOALS``: its measured value, its target and whether it is met."""
    size = (scale or {}).get("ledger_size")
    values = {
        **ratio,
        "rss_growth_pct": rss["growth_pct"] if rss else None,
        "ledger_size_ratio": size["p50_ratio"] if size else None,
        "stream_added_ttfb_ms": streams["added_ms"] if streams else None,
        "stream_rss_growth_pct": (
            streams["memory"]["growth_quarter_to_all_pct"]
            if streams and streams.get("memory")
            else None
        ),
    }
    return {
        key: {
            "what": what,
            "value": values.get(key),
            "target": f"{comparison} {target:g}",
            "met": _met(values.get(key), comparison, target),
        }
        for key, what, comparison, target in GOALS
    }


def rejudged(report: Mapping[str, Any]) -> dict[str, Any]:
    """An earlier run's results judged by today's goals (``--render``): the ratios are
    computed again from its medians, so a goal added since then is shown too."""
    ratio = ratios(report["results"], report["settings"]["concurrency"])
    goals = judged(ratio, report.get("rss"), report.get("scale"), report.get("streams"))
    return {**report, "ratios": ratio, "goals": goals}


# -- rendering -------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> str:
    """A markdown table padded to read well in a terminal too; ``align`` is l/r per
    column."""
    widths = [
        max([len(headers[i]), *(len(row[i]) for row in rows)])
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if side == "l" else cell.rjust(width)
            for cell, width, side in zip(cells, widths, align, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(
        "-" * (w + 1) + ":" if side == "r" else "-" * (w + 2)
        for w, side in zip(widths, align, strict=True)
    )
    return "\n".join([line(headers), rule + "|", *(line(row) for row in rows)])


def _num(value: float | None, fmt: str, signed: bool = False) -> str:
    if value is None:
        return "-"
    text = format(value, ("+" if signed else "") + fmt)
    if text.startswith("-") and not text.strip("-0.,"):  # no "-0.00" for a tiny minus
        text = ("+" if signed else "") + text[1:]
    return text


def results_table(report: Mapping[str, Any]) -> str:
    results = report["results"]
    by_c = report["ratios"]["by_concurrency"]
    rows = []
    for config, pairs in results.items():
        for c in report["settings"]["concurrency"]:
            pair = pairs.get(str(c))
            if pair is None:
                continue
            ratio_key = next((k for k, v in _RATIOS.items() if v == config), None)
            vs_bare = by_c[str(c)][ratio_key] if ratio_key else None
            added = by_c[str(c)].get(f"added_p50_ms_{config}")
            rows.append(
                [
                    pairs["label"],
                    str(c),
                    _num(pair["rps"], ",.0f"),
                    "1.00" if config == "bare" else _num(vs_bare, ".2f"),
                    _num(pair["p50_ms"], ".2f"),
                    _num(added, ".2f", signed=True),
                    _num(pair["p99_ms"], ".2f"),
                    _num(pair["proxy_cpu_us_per_request"], ",.0f"),
                    _num(pair["database_cpu_us_per_request"], ",.0f"),
                    _num(pair.get("machine_cpu_us_per_request"), ",.0f"),
                    f"{pair['errors']:,}",
                ]
            )
    headers = [
        "configuration",
        "conc.",
        "req/s",
        "vs bare",
        "p50 ms",
        "Δp50 ms",
        "p99 ms",
        "proxy CPU µs/req",
        "db CPU µs/req",
        "machine CPU µs/req",
        "errors",
    ]
    return table(headers, rows, "lrrrrrrrrrr")


def goals_table(report: Mapping[str, Any]) -> str:
    ratio = report["ratios"]
    top = ratio["concurrency"]
    by_c = ratio["by_concurrency"]
    rss = report["rss"]
    rows = []
    for key, what, comparison, target in GOALS:
        goal = report["goals"][key]
        value = goal["value"]
        if key in _RATIOS:
            label = f"{what}, req/s at c={top}"
            others = [
                f"c={c}: {_num(by_c[c][key], '.2f')}" for c in by_c if c != str(top)
            ]
            shown = _num(value, ".2f") + (f" ({', '.join(others)})" if others else "")
            wanted = f"{_SYMBOL[comparison]} {target:.2f}"
        elif key == "ledger_size_ratio":
            size = (report.get("scale") or {}).get("ledger_size")
            label = what
            shown = (
                f"{value:.2f} ({size['empty']['p50_ms']:.2f} → "
                f"{size['full']['p50_ms']:.2f} ms, {size['fill']:,} effects)"
                if size and value is not None
                else "not measured"
            )
            wanted = f"{_SYMBOL[comparison]} {target:g}"
        elif key == "stream_added_ttfb_ms":
            found = report.get("streams")
            label = what
            shown = (
                f"{value:+.2f} ms ({found['new_vs_direct']:.2f}x direct; replay "
                f"{found['replay_vs_direct']:.2f}x)"
                if found and value is not None
                else "not measured"
            )
            wanted = f"{_SYMBOL[comparison]} {target:g} ms"
        elif key == "stream_rss_growth_pct":
            memory = (report.get("streams") or {}).get("memory")
            label = what
            shown = (
                f"{value:+.1f} % ({memory['streams']} streams, "
                f"{memory['rss_at_kib']['0.25'] / 1024:.1f} → "
                f"{memory['rss_at_kib']['1.0'] / 1024:.1f} MiB)"
                if memory and value is not None
                else "not measured"
            )
            wanted = f"{_SYMBOL[comparison]} {target:g} %"
        elif key == "new_cpu_vs_bare":
            label = f"{what}, c={top}"
            shown = "not measured" if value is None else f"{value:.2f}"
            wanted = f"{_SYMBOL[comparison]} {target:g}"
        elif key == "added_p50_ms_c1":
            label = what
            shown = "-" if value is None else f"{value:+.2f} ms"
            wanted = f"{_SYMBOL[comparison]} {target:g} ms"
        else:
            effects = rss["effects"] if rss else 0
            label = f"RSS growth across {effects:,} effects"
            shown = (
                f"{_num(value, '.1f', signed=True)} % ({rss['before_kib'] / 1024:.1f} → "
                f"{rss['after_kib'] / 1024:.1f} MiB)"
                if rss
                else "not measured"
            )
            wanted = f"{_SYMBOL[comparison]} {target:g} %"
        met = {True: "✓", False: "✗", None: "-"}[goal["met"]]
        rows.append([label, shown, wanted, met])
    return table(["goal", "measured", "target", "met"], rows, "lrrl")


def scale_table(report: Mapping[str, Any]) -> str | None:
    """Commits (and statements) per new effect, per effect-broker and concurrency."""
    commits = (report.get("scale") or {}).get("commits") or {}
    if not commits:
        return None
    rows = [
        [
            str(row["workers"]),
            str(row["concurrency"]),
            f"{row['effects']:,}",
            _num(row["commits_per_effect"], ".2f"),
            "n/a"
            if row["statements_per_effect"] is None
            else _num(row["statements_per_effect"], ".2f"),
        ]
        for row in commits.values()
    ]
    headers = ["workers", "conc.", "new effects", "commits/effect", "statements/effect"]
    return table(headers, rows, "rrrrr")


def streams_table(report: Mapping[str, Any]) -> str | None:
    """Time to first byte of a recorded SSE stream, each kind against direct."""
    found = report.get("streams")
    if not found:
        return None
    p50 = found["ttfb_p50_ms"]
    labels = {
        "direct": "direct to upstream",
        "new": "effect-broker, new effect",
        "replay": "effect-broker, replay",
    }
    rows = [
        [
            labels[kind],
            _num(p50[kind], ".2f"),
            _num(p50[kind] / p50["direct"], ".2f") + "x",
            _num(p50[kind] - p50["direct"], ".2f", signed=True),
        ]
        for kind in ("direct", "new", "replay")
    ]
    if "commit_p50_ms" in found:
        rows.append(
            [
                "one durable commit (one-row insert)",
                _num(found["commit_p50_ms"], ".2f"),
                "",
                "",
            ]
        )
    headers = [
        f"SSE stream, {found['events']} events ({found['samples']} each)",
        "TTFB p50 ms",
        "vs direct",
        "added ms",
    ]
    parts = [table(headers, rows, "lrrr")]
    runs = [found[key] for key in ("memory", "memory_whole") if found.get(key)]
    if runs:
        first = runs[0]
        parts += [
            "",
            table(
                [
                    f"{first['streams']} recorded streams of "
                    f"{first['bytes_each'] // 1024:,} KiB at once, RSS MiB",
                    "idle",
                    "¼ bytes",
                    "½",
                    "¾",
                    "all",
                    "peak",
                    "after",
                    "peak growth per stream",
                ],
                [_memory_row(memory) for memory in runs],
                "lrrrrrrrr",
            ),
        ]
    return "\n".join(parts)


def _memory_row(memory: Mapping[str, Any]) -> list[str]:
    at = memory["rss_at_kib"]
    limit = memory["receipt_max_bytes"] // 1024
    return [
        f"receipt max {limit:,} KiB, {memory['seconds']:.1f} s",
        *(
            _num(value / 1024, ".1f")
            for value in (
                memory["rss_idle_kib"],
                at["0.25"],
                at["0.5"],
                at["0.75"],
                at["1.0"],
                memory["rss_peak_kib"],
                memory["rss_after_kib"],
            )
        ),
        f"{memory['peak_growth_per_stream_kib']:,.0f} KiB",
    ]


def reconcile_table(report: Mapping[str, Any]) -> str | None:
    """Per safety class: lost effects, how many settled, and how long it took, from
    the first dispatch and from the loss; unsafe as the count that stays unknown."""
    found = report.get("reconcile")
    if not found:
        return None
    rows = []
    for safety, one in found["classes"].items():
        if safety == "unsafe":
            unknown = one["statuses"].get("outcome_unknown", 0)
            settled = f"stays outcome_unknown (by design): {unknown:,}"
        else:
            settled = f"{one['settled']:,}"
        dispatch, loss = one["from_dispatch"], one["from_loss"]
        rows.append(
            [
                safety,
                f"{one['lost']:,}",
                settled,
                _num(dispatch["p50_s"], ".2f"),
                _num(dispatch["max_s"], ".2f"),
                _num(loss["p50_s"], ".2f"),
                _num(loss["max_s"], ".2f"),
                one["bound"],
            ]
        )
    headers = [
        "safety class",
        "lost",
        "settled",
        "p50 s",
        "max s",
        "p50 s after loss",
        "max s after loss",
        "bounded by",
    ]
    return table(headers, rows, "lrrrrrrl")


def reconcile_notes(found: Mapping[str, Any]) -> list[str]:
    reconciler = found["reconciler"]
    lines = [
        f"Reconciliation: per safety class, {found['effects']:,} new effects sent at "
        "once to the demo payment target armed to commit each charge and never answer; "
        f"the contract timeout ({found['timeout_ms'] / 1000:g} s) marks each "
        "outcome_unknown (the loss) and effect-broker's built-in reconciler settles it. "
        "p50/max s: from the effect's first dispatch to the ledger event that settled "
        "it (effect_events.occurred_at); after loss: from the outcome_unknown event. "
        f"A reconciler pass claims up to {reconciler['batch']:g} due effects and "
        f"settles them one after another; with nothing due it idles "
        f"{reconciler['idle_s']:g} s, which is most of what follows the loss. The lease "
        f"grace ({found['lease_grace_ms']} ms here) plays no part: it only delays "
        "effects whose proxy died mid-flight, and this proxy lives.",
    ]
    odd = {
        safety: one
        for safety, one in found["classes"].items()
        if one["answered"] or one["lost_again"] or one["lost"] < one["effects"]
    }
    for safety, one in odd.items():
        lines.append(
            f"Reconciliation, {safety}: {one['answered']:,} answered at once (a resend "
            f"took their armed hang), {one['lost_again']:,} lost again on a resend, "
            f"{one['effects'] - one['recorded']:,} never recorded; client answers "
            f"{one['client_answers']}."
        )
    return lines


def machine_line(report: Mapping[str, Any]) -> str:
    m = report["machine"]
    s = report["settings"]
    timing = (
        f"{s['requests_per_run']:,} requests per run"
        if s["requests_per_run"]
        else f"{s['duration_s']:g} s per run after {s['warmup_s']:g} s warm-up"
    )
    overrides = "".join(
        f", {name}={value} (EXPERIMENT)"
        for name, value in s.get("postgres_overrides", {}).items()
    )
    return (
        f"{m['cpu_model']}, {m['cores']} cores; Python {m['python']}, aiohttp "
        f"{m['aiohttp']}{_loop(m)}; PostgreSQL {m['postgres']} "
        f"({m['postgres_server']}, fsync "
        f"{m['postgres_fsync']}, synchronous_commit {m['postgres_synchronous_commit']}"
        f"{overrides}); "
        f"generator {m['generator']}; medians of {s['runs']} run(s), {timing}."
    )


def _loop(machine: Mapping[str, Any]) -> str:
    """The event loop of the bare proxy and effect-broker alike (runs recorded before
    the bare proxy ran on it did not say, and took asyncio's loop for it)."""
    loop = machine.get("event_loop")
    return f", {loop} under the bare proxy and effect-broker" if loop else ""


def notes(report: Mapping[str, Any]) -> list[str]:
    m = report["machine"]
    lines = []
    if report["results"]:
        lines.append(
            "vs bare: req/s divided by the bare proxy's at the same concurrency. Δp50: "
            "p50 minus the bare proxy's. proxy CPU: the proxy process's user+system CPU "
            "time per request; db CPU: the same for the PostgreSQL backends serving "
            "effect-broker (WAL writer and checkpointer not included); machine CPU: "
            "every core's busy time per request, generator, upstream, database and "
            "any other work on the machine included."
        )
    cores = m["cores"] or 0
    if cores <= 4 and report["results"]:
        lines.append(
            f"Only {cores} cores: the load generator, the upstream, the proxy and "
            "PostgreSQL share them, so absolute req/s are CPU-bound and lower than on a "
            "dedicated machine; the ratios are the comparable part."
        )
    command = report["settings"].get("broker_command")
    if command:
        lines.append(
            f"effect-broker started as `{' '.join(command)} serve` (EXPERIMENT)."
        )
    busy = m.get("cpu_busy_before_start_pct") or 0.0
    if busy > 20.0:
        lines.append(
            f"{busy:.0f} % of the CPU was busy with other work just before the bench "
            "started: the numbers are noisier (and lower) than on an idle machine."
        )
    commits = (report.get("scale") or {}).get("commits") or {}
    if commits:
        lines.append(
            "commits/effect: pg_stat_database.xact_commit of the bench database over "
            "that many new effects, divided by them (every transaction: effect-broker's "
            "writes and its reads). statements/effect: pg_stat_statements calls, n/a "
            "when the extension is not loaded (it needs shared_preload_libraries) and "
            "created in the postgres database."
        )
    size = (report.get("scale") or {}).get("ledger_size")
    if size:
        lines.append(
            f"Ledger size: {size['empty']['effects']:,} new effects at c=1 on a fresh "
            f"ledger ({size['empty']['ledger_effects']:,} effects in it) and as many on "
            f"one with {size['full']['ledger_effects']:,} in it, "
            f"{size['fill']:,} settled effects with receipts written with "
            f"generate_series ({size['fill_seconds']:.0f} s) and analyzed; each ledger "
            f"has its own effect-broker, and the two take turns in {size['rounds']} "
            "rounds (medians of the rounds): p50 "
            f"{size['empty']['p50_ms']:.2f} → {size['full']['p50_ms']:.2f} ms, p99 "
            f"{size['empty']['p99_ms']:.2f} → {size['full']['p99_ms']:.2f} ms."
        )
    if report.get("reconcile"):
        lines.extend(reconcile_notes(report["reconcile"]))
    rss = report["rss"]
    if rss:
        lines.append(
            f"effect-broker RSS: {rss['at_start_kib'] / 1024:.1f} MiB idle at start, "
            f"{rss['before_kib'] / 1024:.1f} MiB after the timed runs, "
            f"{rss['after_kib'] / 1024:.1f} MiB after {rss['effects']:,} more new "
            f"effects at {rss['effects_per_s']:,.0f} effects/s (c=64)."
        )
    return lines


def render(report: Mapping[str, Any]) -> str:
    load = [results_table(report), "", goals_table(report), ""]
    parts = [
        machine_line(report),
        "",
        *(load if report["results"] else []),  # a run of other sections only
        *([extra, ""] if (extra := scale_table(report)) else []),
        *([extra, ""] if (extra := reconcile_table(report)) else []),
        *([extra, ""] if (extra := streams_table(report)) else []),
        *(f"- {line}" for line in notes(report)),
    ]
    return "\n".join(parts)


def markdown_page(report: Mapping[str, Any], rendered: str) -> str:
    date = report["machine"]["date"]
    return (
        "# effect-broker benchmark: latest results\n\n"
        f"Run on {date} with `python bench/run.py` (see `bench/run.py --help`). Goals "
        "are benchmarks to report against, never timed tests.\n\n"
        f"{rendered}\n"
    )
