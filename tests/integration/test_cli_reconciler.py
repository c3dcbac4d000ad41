"""``effect-broker reconciler`` run alone, as the real executable: its admin port.

A reconciler deployed apart from any proxy must be probed and scraped like one;
otherwise a stuck reconciler (unknown effects piling up, no pass for minutes) is
invisible to the alerts that watch its metrics.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import ROOT

EXECUTABLE = str(Path(sys.executable).parent / "effect-broker")
BANNER = re.compile(r"admin on (http://\S+);")
START_TIMEOUT = 60.0


def wait_for_banner(log: Path, process: subprocess.Popen[bytes]) -> str:
    """The admin URL from the start line; fails as soon as the process exits."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if match := BANNER.search(log.read_text(errors="replace")):
            return match.group(1)
        if process.poll() is not None:
            pytest.fail(f"the reconciler exited {process.returncode}: {log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"no start line within {START_TIMEOUT:g}s: {log.read_text()}")


@pytest.fixture
def running_reconciler(
    database_url: str, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env.update(
        EFFECT_BROKER_DATABASE_URL=database_url,
        EFFECT_BROKER_MASTER_KEY=base64.b64encode(os.urandom(32)).decode(),
        EFFECT_BROKER_ROUTES=str(ROOT / "routes.yaml"),
        EFFECT_BROKER_ADMIN_LISTEN="127.0.0.1:0",
        EFFECT_BROKER_ADMIN_TOKEN="reconciler-token",
        COLUMNS="200",
    )
    log = tmp_path / "reconciler.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [EXECUTABLE, "reconciler"], env=env, stderr=output, stdout=output
        )
    try:
        yield wait_for_banner(log, process), process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_the_standalone_reconciler_serves_health_metrics_and_stops_on_sigterm(
    running_reconciler: tuple[str, subprocess.Popen[bytes]],
) -> None:
    admin, process = running_reconciler
    assert requests.get(f"{admin}/healthz", timeout=10).status_code == 200
    assert requests.get(f"{admin}/readyz", timeout=10).status_code == 200
    metrics = requests.get(f"{admin}/metrics", timeout=10).text
    assert "effect_broker_unknown_effects" in metrics
    assert "effect_broker_reconciler_last_pass_timestamp_seconds" in metrics
    unauthorized = requests.get(f"{admin}/v1/effects", timeout=10)
    assert unauthorized.status_code == 401
    listed = requests.get(
        f"{admin}/v1/effects",
        headers={"Authorization": "Bearer reconciler-token"},
        timeout=10,
    )
    assert listed.status_code == 200, listed.text

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
