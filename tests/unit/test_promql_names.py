"""The small PromQL reader the dashboard and alert tests rely on."""

from __future__ import annotations

from tests.promql import metric_names


def test_metric_names_skip_functions_labels_grouping_and_variables() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (le, route) (rate(a_bucket{route=~"$route",'
        'x="y(z)"}[$__rate_interval]))) / on (route) group_left b_total or time() - c'
    )
    assert metric_names(expression) == {"a_bucket", "b_total", "c"}


def test_metric_names_see_a_bare_metric_and_ignore_numbers() -> None:
    assert metric_names("up == 0 and 1e3 > 2") == {"up"}
