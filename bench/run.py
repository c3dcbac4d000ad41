"""The effect-broker benchmark: `python bench/run.py [--quick]`, or `effect-broker bench`.

Starts a minimal upstream, the bare pass-through proxy (the baseline) and effect-broker
on a fresh PostgreSQL database, each in its own process; drives each with a load
generator in its own process (wrk when installed, else asyncio + aiohttp) at concurrency
1 and 64, three runs each; prints a table of medians and writes ``bench/results.json``.
``--help`` lists the knobs.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, ``bench`` is not importable yet: its parent is the repository.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.harness import main

    sys.exit(main())
