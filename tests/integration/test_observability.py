"""What the alerts and the dashboard read: a live ``/metrics`` of a running broker.

The dashboard may only name series the broker really exports; the signals the alerts
added (ledger unreachable, reconciler heartbeat) move when their cause happens.
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from effect_broker.reconciler import Reconciler
from tests.integration.harness import Broker, request
from tests.promql import dashboard_expressions, metric_names
from tests.support import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "effect-broker.json"
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


async def _scrape(broker: Broker) -> str:
    answer = await request("GET", f"{broker.admin_url}/metrics")
    assert answer.status == 200, answer
    return answer.body.decode()


def _exported(text: str) -> set[str]:
    """Every series name the exposition declares, whether or not it has samples yet."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def _sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_the_dashboard_names_only_metrics_the_broker_exports(
    broker: Broker,
) -> None:
    answer = await request(
        "POST",
        f"{broker.proxy_url}/payments/v1/charges",
        data=json.dumps({"amount": 5, "currency": "usd", "order_id": "o-1"}).encode(),
        headers={"Content-Type": "application/json", "Operation-Key": "o-1"},
    )
    assert answer.status == 201, answer
    exported = _exported(await _scrape(broker))
    named = {n for e in dashboard_expressions(DASHBOARD) for n in metric_names(e)}

    assert named - exported == set(), f"not exported: {sorted(named - exported)}"
    # What an operator opens it for: outcomes, unknowns and their age, cost, replays,
    # probes and attempts.
    assert named >= {
        "effect_broker_effects_total",
        "effect_broker_unknown_effects",
        "effect_broker_oldest_unknown_age_seconds",
        "effect_broker_proxy_overhead_seconds_bucket",
        "effect_broker_replays_total",
        "effect_broker_probes_total",
        "effect_broker_attempts_total",
    }
    assert "effect_broker_no_such_metric" not in exported  # the check can fail


async def test_a_reconciler_pass_sets_its_heartbeat(broker: Broker) -> None:
    name = "effect_broker_reconciler_last_pass_timestamp_seconds"
    before = _sample(await _scrape(broker), name)
    clock = await broker.state.store.clock()

    await Reconciler(broker.state.engine).run_once()
    after = _sample(await _scrape(broker), name)

    assert before == 0.0
    assert after is not None and abs(after - clock.timestamp()) < 60


async def test_an_unreachable_ledger_is_counted_and_metrics_still_answer(
    broker: Broker,
) -> None:
    name = "effect_broker_store_unavailable_total"
    assert _sample(await _scrape(broker), name, surface="proxy") is None
    await broker.state.store.close()  # every ledger call now fails as unreachable

    refused = await request(
        "POST",
        f"{broker.proxy_url}/payments/v1/charges",
        data=b'{"order": "o-2"}',
        headers={"Content-Type": "application/json", "Operation-Key": "o-2"},
    )
    ready = await request("GET", f"{broker.admin_url}/readyz")
    text = await _scrape(broker)

    assert refused.status == 503, refused
    assert ready.status == 503, ready
    assert _sample(text, name, surface="proxy") == 1.0
    # One for readiness, one for the refresh of this very scrape.
    assert _sample(text, name, surface="admin") == 2.0
