"""A newcomer's first commands, run as the real executable in an empty folder.

``init`` writes the starter routes and never overwrites; ``up`` without a routes file,
or with a broken one, says so in one line and creates nothing: no key, no CA, no
database cluster (a 39 MB surprise in a folder where nothing could start).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from effect_broker.config.routes_file import load_routes
from tests.support import ROOT

EXECUTABLE = str(Path(sys.executable).parent / "effect-broker")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command with a bare environment: no EFFECT_BROKER_* variable at all."""
    return subprocess.run(
        [EXECUTABLE, *args],
        capture_output=True,
        text=True,
        env={"PATH": str(Path(sys.executable).parent), "COLUMNS": "200"},
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_init_writes_the_starter_routes_and_never_overwrites(tmp_path: Path) -> None:
    first = run("init", cwd=tmp_path)
    written = (tmp_path / "routes.yaml").read_text()
    (tmp_path / "routes.yaml").write_text("# mine\n" + written)
    again = run("init", cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    assert (
        written.splitlines()[0] == "# yaml-language-server: $schema=./routes.schema.json"
    )
    schema = json.loads((tmp_path / "routes.schema.json").read_text())
    assert schema["title"] == "effect-broker routes.yaml, version 1"
    assert len(load_routes(tmp_path / "routes.yaml").routes) == 4
    assert again.returncode == 1
    assert again.stderr.strip() == "error: routes.yaml already exists; not overwritten"
    assert (tmp_path / "routes.yaml").read_text().startswith("# mine\n")


def test_the_starter_is_the_repositorys_routes_file() -> None:
    starter = (ROOT / "src" / "effect_broker" / "demo" / "routes.yaml").read_text()
    root = (ROOT / "routes.yaml").read_text()
    assert starter == root


def test_up_without_routes_says_so_in_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    result = run("up", cwd=tmp_path)

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: no routes file ./routes.yaml: `effect-broker init` writes a starter "
        "here, `effect-broker up --demo` runs the packaged demo"
    )
    assert list(tmp_path.iterdir()) == []


def test_up_with_broken_routes_fails_before_any_key_or_cluster(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text("version: 1\ncontracts: []\nroutes: [1]\n")

    result = run("up", "--demo", cwd=tmp_path)

    assert result.returncode == 1
    assert result.stderr.startswith("error: routes.yaml:"), result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["routes.yaml"]


def test_up_on_a_busy_port_fails_before_any_key_or_cluster(tmp_path: Path) -> None:
    """A busy port was noticed only after the key, the CA and the database cluster
    had been created; now it is the first thing checked after the routes."""
    assert run("init", cwd=tmp_path).returncode == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        proxy = run("up", "--listen", f"127.0.0.1:{port}", cwd=tmp_path)
        admin = run("up", "--admin-listen", f"127.0.0.1:{port}", cwd=tmp_path)
        demo = run("up", "--demo", "--demo-port", str(port), cwd=tmp_path)

    assert proxy.returncode == 1
    assert proxy.stderr.strip() == (
        f"error: the proxy address 127.0.0.1:{port} is already in use (another "
        "effect-broker, or another program); choose another with --listen or "
        "EFFECT_BROKER_LISTEN"
    )
    assert "--admin-listen" in admin.stderr and admin.returncode == 1
    assert "--demo-port" in demo.stderr and demo.returncode == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "routes.schema.json",
        "routes.yaml",
    ]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("stage", ["starting embedded PostgreSQL", "effect-broker is up"])
def test_ctrl_c_at_any_stage_of_up_stops_everything(tmp_path: Path, stage: str) -> None:
    """Ctrl-C (SIGINT to the terminal's whole process group) while the embedded
    PostgreSQL starts, or once everything is up: up exits, saying so, and leaves no
    process of its group running (no PostgreSQL behind it)."""
    assert run("init", cwd=tmp_path).returncode == 0
    # The embedded server runs as its own user when tests run as root: its data lives
    # outside pytest's private temporary folder.
    data = Path(tempfile.mkdtemp(prefix="effect-broker-ctrl-c-"))
    data.chmod(0o755)
    log = tmp_path / "up.log"
    proxy, admin = (f"127.0.0.1:{free_port()}" for _ in range(2))
    command = [EXECUTABLE, "up", "--data-dir", str(data / "state"), "--listen", proxy]
    try:
        with log.open("w") as output:
            process = subprocess.Popen(
                [*command, "--admin-listen", admin],
                stdout=output,
                stderr=output,
                cwd=tmp_path,
                env={"PATH": str(Path(sys.executable).parent), "COLUMNS": "200"},
                start_new_session=True,  # its own group, as a terminal's job is
                # A shell may start a background job with SIGINT ignored; a terminal's
                # foreground job has it at its default.
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            deadline = time.monotonic() + 120
            while stage not in log.read_text():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            os.killpg(process.pid, signal.SIGINT)
            code = process.wait(timeout=60)
            deadline = time.monotonic() + 30
            while _group_alive(process.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            alive = _group_alive(process.pid)
            if alive:
                os.killpg(process.pid, signal.SIGKILL)
    finally:
        shutil.rmtree(data, ignore_errors=True)

    text = log.read_text()
    assert not alive, text
    if stage == "effect-broker is up":
        assert code == 0, text
        assert text.rstrip().endswith("effect-broker stopped")
    else:
        assert code == 130, text
        assert text.rstrip().endswith("interrupted: stopped everything that had started")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
