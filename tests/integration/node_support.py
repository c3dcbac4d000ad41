"""Node.js for the tests that drive real JavaScript clients: undici in tests/node, and
pinned Node versions in tests/node/versions, each installed with ``npm ci`` on first
use. A machine without node or npm skips those tests, saying which is missing.

The installs land in the checkout, shared by every pytest process there (the suite's
parallel workers among them): each ``npm ci`` runs under an exclusive lock on its
folder, and the wanted file is looked for under that lock, so a process never starts
an install (which first deletes node_modules) beside another's, nor takes a half-made
install for a finished one.

Shared by the HTTPS client tests and the MCP conformance suite, so it lives in a
support module rather than in either test module.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parents[1] / "node"
VERSIONS_DIR = NODE_DIR / "versions"
NODE_BINARIES = {
    "22": VERSIONS_DIR / "node_modules" / "node" / "bin" / "node",
    "24": VERSIONS_DIR / "node_modules" / "node24" / "bin" / "node",
}


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (on the directory itself: no lock file
    in the checkout); the kernel drops it if this process dies."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def npm_ci(folder: Path, wanted: Path, what: str, *, timeout: float = 600) -> None:
    """``npm ci`` in ``folder`` unless ``wanted`` is there already; the test skips,
    saying why in one line, when npm, its registry or the install is missing. Another
    process installing there is waited for."""
    with _locked(folder):
        _npm_ci_unlocked(folder, wanted, what, timeout)


def _npm_ci_unlocked(folder: Path, wanted: Path, what: str, timeout: float) -> None:
    if wanted.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: cannot fetch {what}")
    place = folder.relative_to(NODE_DIR.parent.parent)
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=folder,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm ci in {place} ran {timeout:.0f}s: no npm registry?")
    if done.returncode != 0 or not wanted.exists():
        last = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        pytest.skip(f"npm ci in {place} failed (registry?): {last[:200]}")


def node_ready() -> None:
    """Node and undici (``npm ci`` in tests/node), installed on first use."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed on this machine")
    undici = NODE_DIR / "node_modules" / "undici"
    npm_ci(NODE_DIR, undici, "undici for Node's fetch", timeout=300)


def node_binary(major: str) -> Path:
    """Node of this major version, from the npm registry (``npm ci`` in
    tests/node/versions on first use); skips when it cannot be had."""
    node_ready()  # undici, for the EnvHttpProxyAgent client
    binary = NODE_BINARIES[major]
    npm_ci(VERSIONS_DIR, binary, f"Node {major}")
    return binary
