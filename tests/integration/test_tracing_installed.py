"""``tracing.recording`` is a flag, so each case runs in a fresh interpreter: a tracer
provider, once installed, stays for the life of the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "none installed": (
        "from effect_broker import tracing\n"
        "assert not tracing.recording()\n"
        "assert tracing.untraced({})\n"
    ),
    "installed through install": (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from effect_broker import tracing\n"
        "tracing.install(TracerProvider())\n"
        "assert tracing.recording()\n"
        "assert not tracing.untraced({})\n"
    ),
    "installed before effect-broker was imported": (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "from effect_broker import tracing\n"
        "assert tracing.recording()\n"
    ),
    "configured from OTEL_TRACES_EXPORTER": (
        "from effect_broker import tracing\n"
        "tracing.configure({'OTEL_TRACES_EXPORTER': 'console'})\n"
        "assert tracing.recording()\n"
    ),
}


@pytest.mark.parametrize("program", CASES.values(), ids=CASES.keys())
def test_requests_are_traced_once_a_provider_is_installed(program: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
