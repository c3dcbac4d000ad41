"""Node.js for the tests that drive real JavaScript clients: undici in tests/node, and
pinned Node versions in tests/node/versions, each installed with ``npm ci`` on first
use. A machine without node or npm skips those tests, saying which is missing.

Shared by the HTTPS client tests and the MCP conformance suite, so it lives in a
support module rather than in either test module.
"""

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


def node_ready() -> None:
    """Node and undici (``npm ci`` in tests/node), installed on first use."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed on this machine")
    if (NODE_DIR / "node_modules" / "undici").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot install undici for Node's fetch")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=NODE_DIR,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"npm ci in tests/node failed: {done.stderr.decode()[-300:]}")


def node_binary(major: str) -> Path:
    """Node of this major version, from the npm registry (``npm ci`` in
    tests/node/versions on first use); skips when it cannot be had."""
    node_ready()  # undici, for the EnvHttpProxyAgent client
    binary = NODE_BINARIES[major]
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: cannot fetch another Node version")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=VERSIONS_DIR,
            capture_output=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.skip(f"npm ci in tests/node/versions failed: {done.stderr[-300:]!r}")
    return binary
