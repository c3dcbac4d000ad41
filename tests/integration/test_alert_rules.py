"""The alert rules and the dashboard's PromQL, checked by Prometheus's own promtool.

promtool is not a Python package: CI installs it (Debian's ``prometheus``); elsewhere
these tests are skipped and say how to get it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.promql import dashboard_expressions, metric_names
from tests.support import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "effect-broker.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not on PATH (apt-get install prometheus, or a Prometheus "
    "release tarball); .ci/run installs it",
)


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _alerts() -> list[dict[str, object]]:
    document = yaml.safe_load((PROMETHEUS / "alerts.yaml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = yaml.safe_load((PROMETHEUS / "alerts.test.yaml").read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for rule in _alerts():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} never fires"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} always"


def test_the_alerts_cover_the_operational_questions() -> None:
    named = {name for rule in _alerts() for name in metric_names(str(rule["expr"]))}
    assert named >= {
        "effect_broker_oldest_unknown_age_seconds",
        "effect_broker_unknown_effects",
        "effect_broker_fenced_writes_total",
        "effect_broker_store_unavailable_total",
        "effect_broker_reconciler_last_pass_timestamp_seconds",
        "effect_broker_payload_conflicts_total",
        "effect_broker_suspected_duplicates_total",
    }


@needs_promtool
def test_promtool_accepts_the_rules_and_their_tests_pass() -> None:
    checked = _promtool("check", "rules", "alerts.yaml", cwd=PROMETHEUS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", "alerts.test.yaml", cwd=PROMETHEUS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


@needs_promtool
def test_promtool_fails_a_rule_test_whose_expectation_is_wrong(tmp_path: Path) -> None:
    """The run above could pass vacuously; a wrong expectation must fail it."""
    shutil.copy(PROMETHEUS / "alerts.yaml", tmp_path / "alerts.yaml")
    tests = (PROMETHEUS / "alerts.test.yaml").read_text()
    (tmp_path / "alerts.test.yaml").write_text(
        tests.replace("{severity: page, route: charge}", "{severity: page, route: x}", 1)
    )
    tested = _promtool("test", "rules", "alerts.test.yaml", cwd=tmp_path)
    assert tested.returncode != 0
    assert "EffectBrokerUnknownEffectsAging" in tested.stdout + tested.stderr


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """Each query as a recording rule, with Grafana's variables given values."""
    rules = [
        {
            "record": f"dashboard:query_{number}",
            "expr": expression.replace("$__rate_interval", "5m").replace("$route", ".*"),
        }
        for number, expression in enumerate(dashboard_expressions(DASHBOARD))
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = _promtool("check", "rules", path.name, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
