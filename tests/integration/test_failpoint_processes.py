"""Failpoints in a real process: exit as before; stop freezes it until SIGCONT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from effect_broker import failpoints

HIT = (
    "from effect_broker import failpoints\n"
    "for _ in range(3):\n"
    "    failpoints.hit(failpoints.BEFORE_UPSTREAM_SEND)\n"
    "    print('passed', flush=True)\n"
)


def run_armed(armed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "EFFECT_BROKER_FAILPOINTS": armed}
    return subprocess.Popen(
        [sys.executable, "-c", HIT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def process_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_exit_keeps_its_code_and_its_line() -> None:
    proc = run_armed("before_upstream_send")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == failpoints.EXIT_CODE
    assert out == ""
    assert "failpoint before_upstream_send hit, exiting" in err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_stop_freezes_the_process_until_sigcont() -> None:
    proc = run_armed("before_upstream_send:stop:every=2")
    try:
        deadline = time.monotonic() + 30
        while process_state(proc.pid) != "T":  # polled with a deadline
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the armed process never stopped"
            time.sleep(0.02)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert out.split() == ["passed"] * 3  # the first hit passed, the second froze it
    assert "failpoint before_upstream_send hit, stopping (SIGSTOP)" in err
    assert "failpoint before_upstream_send: resumed" in err
