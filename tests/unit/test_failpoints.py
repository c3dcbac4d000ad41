"""Failpoints: what an entry of ``EFFECT_BROKER_FAILPOINTS`` arms, and the two actions
in a real process (exit as before; stop freezes it until SIGCONT)."""

from __future__ import annotations

import os
import random
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


def test_a_bare_name_exits_at_every_hit() -> None:
    (arming,) = failpoints.parse(" before_upstream_send ").values()
    assert arming == failpoints.Arming(failpoints.EXIT, every=1, probability=1.0)
    rng = random.Random(1)
    assert [arming.fires(rng) for _ in range(3)] == [True, True, True]


def test_stop_every_third_hit_acts_on_the_third_and_sixth() -> None:
    armed = failpoints.parse("after_reserve,before_upstream_send:stop:every=3")
    assert set(armed) == {failpoints.AFTER_RESERVE, failpoints.BEFORE_UPSTREAM_SEND}
    arming = armed[failpoints.BEFORE_UPSTREAM_SEND]
    assert arming.action == failpoints.STOP
    rng = random.Random(1)
    assert [arming.fires(rng) for _ in range(6)] == [False, False, True] * 2


def test_a_probability_lets_some_hits_pass() -> None:
    arming = failpoints.parse("before_upstream_send:stop:p=0.5")["before_upstream_send"]
    rng = random.Random(7)
    fired = sum(arming.fires(rng) for _ in range(400))
    assert 120 < fired < 280


@pytest.mark.parametrize(
    "raw,says",
    [
        ("before_upstream_sned", "unknown failpoints"),
        ("before_upstream_send:freeze", "cannot read 'freeze'"),
        ("before_upstream_send:stop:every=0", "cannot read 'every=0'"),
        ("before_upstream_send:stop:p=1.5", "cannot read 'p=1.5'"),
        ("before_upstream_send:p=x", "cannot read 'p=x'"),
    ],
)
def test_an_unreadable_entry_is_refused_by_name(raw: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        failpoints.parse(raw)


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


def test_an_arming_reads_back_as_its_entry() -> None:
    armed = failpoints.parse("before_upstream_send:stop:every=3,after_reserve")
    assert [plan.describe(name) for name, plan in sorted(armed.items())] == [
        "after_reserve:exit",
        "before_upstream_send:stop:every=3",
    ]
    probable = failpoints.parse("before_upstream_send:stop:p=0.25")
    assert probable["before_upstream_send"].describe("x") == "x:stop:p=0.25"
