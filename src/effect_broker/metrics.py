"""Prometheus metrics: correctness first (unknown effects, fenced writes), then cost.

One registry per process state, not the global one, so several proxies can live in one
test process. No tenant label anywhere: tenants are unbounded, routes are not.

Under ``serve --workers N`` the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` for its
workers, and prometheus-client keeps every value in a per-process file there. Any
worker's ``/metrics`` then answers for all of them: counters and histograms are summed,
the unknown-effect gauges (read from the ledger, the same for every worker) take the
value set most recently, the reconciler heartbeat the latest pass of any worker. One
scrape of the shared admin port is the whole picture, whichever worker answers it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The directory workers share their metrics through, when there is one."""
    return os.environ.get(MULTIPROCESS_DIR) or None


@dataclass(frozen=True, slots=True)
class RouteMetrics:
    """The series a request on one route touches every time (``Metrics.of_route``)."""

    overhead: Histogram
    replays: Counter


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # prometheus-client chose file-backed values at import if the variable was set.
        self.shared_dir = multiprocess_dir()
        self.effects = Counter(
            "effect_broker_effects",
            "Effects by the outcome a request or the reconciler left them in.",
            ["route", "outcome"],
            registry=self.registry,
        )
        self.unknown = Gauge(
            "effect_broker_unknown_effects",
            "Effects unknown or awaiting an operator, by route and status.",
            ["route", "status"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.oldest_unknown = Gauge(
            "effect_broker_oldest_unknown_age_seconds",
            "Age of the oldest effect still unknown or in manual review, by route.",
            ["route"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.attempts = Counter(
            "effect_broker_attempts",
            "Dispatch attempts sent upstream, by route and what they proved.",
            ["route", "delivery"],
            registry=self.registry,
        )
        self.probes = Counter(
            "effect_broker_probes",
            "Reconciliation lookups by result (found, absent, unknown), transactional "
            "kit lookups included (a tombstoned attempt counts as absent).",
            ["route", "result"],
            registry=self.registry,
        )
        self.tombstones = Counter(
            "effect_broker_tombstones",
            "Tombstones sent to transactional targets after a lookup found an attempt "
            "absent, by result (written: absence proven now; found: proven before; "
            "refused: the attempt had committed; unknown: no proof).",
            ["route", "result"],
            registry=self.registry,
        )
        self.fenced = Counter(
            "effect_broker_fenced_writes",
            "Writes refused because a newer worker had moved the effect (stale version).",
            registry=self.registry,
        )
        self.conflicts = Counter(
            "effect_broker_payload_conflicts",
            "Operation keys reused with a different payload (answered 422).",
            ["route"],
            registry=self.registry,
        )
        self.suspected_duplicates = Counter(
            "effect_broker_suspected_duplicates",
            "New operation keys whose payload equals a recent effect's on the same "
            "route (a key minted per retry?), by the contract's action (warn, hold).",
            ["route", "action"],
            registry=self.registry,
        )
        self.replays = Counter(
            "effect_broker_replays",
            "Stored receipts given back instead of a new dispatch.",
            ["route"],
            registry=self.registry,
        )
        self.store_unavailable = Counter(
            "effect_broker_store_unavailable",
            "Answers given because the ledger database could not be reached, by where "
            "(proxy: a request refused; admin: readiness or a metrics refresh failed).",
            ["surface"],
            registry=self.registry,
        )
        self.pruned = Counter(
            "effect_broker_pruned_effects",
            "Settled effects deleted from the ledger past their contract's "
            "ledger_retention.",
            ["route"],
            registry=self.registry,
        )
        self.reconciler_heartbeat = Gauge(
            "effect_broker_reconciler_last_pass_timestamp_seconds",
            "Unix time of the reconciler's last completed pass; 0 before the first one "
            "or in a process that runs no reconciler.",
            registry=self.registry,
            multiprocess_mode="max",
        )
        self.overhead = Histogram(
            "effect_broker_proxy_overhead_seconds",
            "Time a recorded request spent in the proxy, upstream time excluded.",
            ["route"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        # Routes come from the routes file: a handful, never a client's choice.
        self._routes: dict[str, RouteMetrics] = {}
        self._counted: dict[tuple[Counter, tuple[str, ...]], Counter] = {}

    def of_route(self, route: str) -> RouteMetrics:
        """The per-request series of ``route``, looked up once: ``labels()`` validates
        and locks on every call, and every request counts its route's."""
        found = self._routes.get(route)
        if found is None:
            found = self._routes[route] = RouteMetrics(
                overhead=self.overhead.labels(route), replays=self.replays.labels(route)
            )
        return found

    def count(self, counter: Counter, *labels: str) -> None:
        """``counter.labels(*labels).inc()`` with the labelled series looked up once:
        the request path counts an attempt and a settled effect each time, and the
        label values (a route, an outcome) are few."""
        key = (counter, labels)
        series = self._counted.get(key)
        if series is None:
            series = self._counted[key] = counter.labels(*labels)
        series.inc()

    def exposition(self) -> bytes:
        """The Prometheus text of ``/metrics``: this process's, or every worker's."""
        if self.shared_dir is None:
            return generate_latest(self.registry)
        return generate_latest(self._merged())

    def series(self, gauge: Gauge) -> Iterator[dict[str, str]]:
        """The label sets ``gauge`` has had in this process or (workers) in any."""
        name = next(iter(gauge.describe())).name
        source = self._merged().collect() if self.shared_dir else gauge.collect()
        for family in source:
            if family.name != name:
                continue
            for sample in family.samples:
                yield dict(sample.labels)

    def _merged(self) -> CollectorRegistry:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.shared_dir)  # type: ignore[no-untyped-call]
        return registry
