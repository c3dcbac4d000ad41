"""Child processes of the bench: start one, wait for its address, read its RSS and CPU."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: ours without EFFECT_BROKER_* (the bench sets what
    it means to), with the repository root importable so ``-m bench.x`` works."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def python_module(module: str, *args: str) -> list[str]:
    """A command running ``module`` with the interpreter running the bench."""
    return [sys.executable, "-m", module, *args]


@dataclass
class Server:
    """A server child process whose log told us where it listens."""

    name: str
    process: subprocess.Popen[bytes]
    match: re.Match[str]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_seconds(self) -> float:
        """CPU time of the process and every process under it (a supervisor's workers)."""
        return sum(cpu_seconds(pid) for pid in family(self.pid))

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it does not go in ``timeout``."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(
    name: str,
    command: Sequence[str],
    *,
    log: Path,
    ready: re.Pattern[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Server:
    """Start ``command`` with stdout and stderr in ``log`` and wait until a log line
    matches ``ready`` (the line that names the bound address)."""
    with log.open("wb") as sink:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else child_env(),
            cwd=ROOT,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ready.search(log.read_text(errors="replace"))
        if found:
            return Server(name, process, found, log)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
        process.wait()
    tail = log.read_text(errors="replace")[-3000:]
    raise RuntimeError(
        f"{name} did not start (exit code {process.returncode}); its log {log}:\n{tail}"
    )


def family(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc/PID/task/*/children."""
    found = [pid]
    for one in found:
        for task in Path(f"/proc/{one}/task").glob("*"):
            try:
                found.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
    return found


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc/PID/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS line")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far, from /proc/PID/stat (0 for a
    process that has just gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def machine_cpu_seconds() -> float:
    """CPU time all the machine's cores have been busy so far (everything but idle and
    iowait, from /proc/stat): the bench's and every other process's, so that per request
    it shows what the generator, upstream and database cost besides the proxy."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _CLOCK_TICKS


def machine_busy_percent(seconds: float = 1.0) -> float:
    """How busy all CPUs were over the next ``seconds`` (other work disturbs a bench)."""

    def sample() -> tuple[int, int]:
        values = [
            int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]
        ]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    total, idle = sample()
    time.sleep(seconds)
    total2, idle2 = sample()
    elapsed = total2 - total
    return 100.0 * (elapsed - (idle2 - idle)) / elapsed if elapsed else 0.0
