"""The request path's shortcuts to labelled series count what ``labels()`` would."""

from __future__ import annotations

from effect_broker.metrics import Metrics


def _sample(metrics: Metrics, name: str, labels: dict[str, str]) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_count_adds_one_to_the_series_of_its_labels_each_time() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.count(metrics.attempts, "charge", "answered")
    metrics.count(metrics.attempts, "charge", "unknown")
    metrics.count(metrics.attempts, "refund", "answered")
    metrics.attempts.labels("charge", "answered").inc()  # the long way, same series
    assert (
        _sample(
            metrics,
            "effect_broker_attempts_total",
            {"route": "charge", "delivery": "answered"},
        )
        == 4
    )
    assert (
        _sample(
            metrics,
            "effect_broker_attempts_total",
            {"route": "charge", "delivery": "unknown"},
        )
        == 1
    )
    assert (
        _sample(
            metrics,
            "effect_broker_attempts_total",
            {"route": "refund", "delivery": "answered"},
        )
        == 1
    )


def test_a_routes_request_series_are_its_own() -> None:
    metrics = Metrics()
    metrics.of_route("charge").replays.inc()
    metrics.of_route("charge").replays.inc()
    metrics.of_route("refund").overhead.observe(0.001)
    assert metrics.of_route("charge") is metrics.of_route("charge")
    assert _sample(metrics, "effect_broker_replays_total", {"route": "charge"}) == 2
    assert _sample(metrics, "effect_broker_replays_total", {"route": "refund"}) in (
        None,
        0,
    )
