"""Node for the tests that drive Node clients or Node tools: the machine's ``node``
with undici (tests/node), a Node of another major version from the npm registry
(tests/node/versions), and ``npm ci`` in a folder, which skips with one line saying
why when the registry cannot be reached."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parents[1] / "node"
VERSIONS_DIR = NODE_DIR / "versions"
NODE_BINARIES = {
    "22": VERSIONS_DIR / "node_modules" / "node" / "bin" / "node",
    "24": VERSIONS_DIR / "node_modules" / "node24" / "bin" / "node",
}


def npm_ci(folder: Path, what: str, *, timeout: float = 600) -> None:
    """``npm ci`` in ``folder`` (a package-lock.json beside it); skips the test, in
    one line, when npm is missing or the install fails (no registry, say)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: cannot install {what}")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=folder,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm ci for {what} took over {timeout:g}s (npm registry unreachable?)"
        )
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        pytest.skip(f"npm ci for {what} failed (npm registry unreachable?): {last[:200]}")


def node_ready() -> None:
    """Node and undici (``npm ci`` in tests/node), installed on first use."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed on this machine")
    if not (NODE_DIR / "node_modules" / "undici").is_dir():
        npm_ci(NODE_DIR, "undici for Node's fetch", timeout=300)


def node_binary(major: str) -> Path:
    """Node of this major version, from the npm registry (``npm ci`` in
    tests/node/versions on first use); skips when it cannot be had."""
    node_ready()  # undici, for the EnvHttpProxyAgent client
    binary = NODE_BINARIES[major]
    if not binary.exists():
        npm_ci(VERSIONS_DIR, f"Node {major}")
        if not binary.exists():
            pytest.skip(f"npm ci in {VERSIONS_DIR} installed no Node {major} binary")
    return binary
