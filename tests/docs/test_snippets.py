"""Every shell and Python block of the tutorial and the how-to guides, executed.

Each page runs in a fresh folder of its own, its blocks in page order, against a fresh
database on the test PostgreSQL server (``EFFECT_BROKER_DATABASE_URL``, so ``up`` needs
no embedded server), with the ``effect-broker`` of this installation first on ``PATH``.
The addresses the pages use (proxy 8080, admin 8081, demo target 9000) are moved to
free ports, the only change made to a block's text. A block a machine like this cannot
run (a cluster, the network, a command that serves until stopped) carries its reason
in the page source; see ``docs_support.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.docs.docs_support import Action, Snippet, snippets
from tests.support import poll

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [DOCS / "tutorial.md", *sorted((DOCS / "how-to").glob("*.md"))]
BLOCK_TIMEOUT = 120.0
READY_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def on_free_ports(code: str, ports: dict[int, int]) -> str:
    proxy, admin, target = ports[8080], ports[8081], ports[9000]
    code = code.replace(
        "effect-broker up --demo",
        f"effect-broker up --demo --listen 127.0.0.1:{proxy} "
        f"--admin-listen 127.0.0.1:{admin} --demo-port {target}",
    )
    for documented, free in ports.items():
        code = code.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{free}")
    return code


def command(snippet: Snippet, code: str) -> list[str]:
    if snippet.language == "python":
        return [sys.executable, "-c", code]
    return ["bash", "-euo", "pipefail", "-c", code]


def clean_environment(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECT_BROKER_")}
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        env.pop(name, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["EFFECT_BROKER_DATABASE_URL"] = database_url
    # What the kit example in the how-to reads; it only builds its application.
    env["DATABASE_URL"] = database_url
    env["KIT_SECRET"] = "a-secret-only-this-test-knows"
    return env


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the whole group, as a terminal sends it; SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def is_ready(process: subprocess.Popen[bytes], log: Path, snippet: Snippet) -> bool:
    """Whether the background block printed its ready text; fails if it exited."""
    output = log.read_text(errors="replace")
    if snippet.ready_text in output:
        return True
    if process.poll() is not None:
        pytest.fail(
            f"{snippet.where} exited ({process.returncode}) before printing "
            f"{snippet.ready_text!r}:\n{output}"
        )
    return False


@pytest.fixture
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in reversed(started):
        stop(process)


def test_every_page_marks_its_blocks_readably() -> None:
    """Parsing refuses an unknown order or a skip without a reason."""
    for page in PAGES:
        for snippet in snippets(page):
            assert snippet.action is not Action.SKIP or snippet.reason


@pytest.mark.postgres
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.stem)
async def test_the_page_runs_as_written(
    page: Path,
    empty_database_url: str,
    tmp_path: Path,
    background: list[subprocess.Popen[bytes]],
) -> None:
    runnable = [s for s in snippets(page) if s.action is not Action.SKIP]
    if not runnable:
        pytest.skip(f"{page.name} has no block this machine can run")
    folder = tmp_path / "reader"
    folder.mkdir()
    env = clean_environment(empty_database_url)
    ports = {documented: free_port() for documented in (8080, 8081, 9000)}
    for snippet in runnable:
        code = on_free_ports(snippet.code, ports)
        if snippet.action is Action.BACKGROUND:
            log = tmp_path / f"background-{snippet.line}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command(snippet, code),
                    cwd=folder,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            background.append(process)
            await poll(
                partial(is_ready, process, log, snippet),
                within=READY_TIMEOUT,
                every=0.1,
                what=f"{snippet.where} to print {snippet.ready_text!r}",
            )
            continue
        done = subprocess.run(
            command(snippet, code),
            cwd=folder,
            env=env,
            capture_output=True,
            timeout=BLOCK_TIMEOUT,
        )
        assert done.returncode == 0, (
            f"{snippet.where} exited {done.returncode}\n--- the block:\n{code}\n"
            f"--- stdout:\n{done.stdout.decode(errors='replace')}\n"
            f"--- stderr:\n{done.stderr.decode(errors='replace')}"
        )
