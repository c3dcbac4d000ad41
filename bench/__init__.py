"""The effect-broker benchmark: ``python bench/run.py`` (or ``effect-broker bench``).

Every piece runs in a process of its own, as in production: a minimal upstream
(``upstream.py``), the bare pass-through proxy that is the baseline (``bare_proxy.py``),
``effect-broker serve`` on a fresh PostgreSQL database (``ledger.py``), and a load
generator (``loadgen.py``: wrk when installed, else asyncio + aiohttp).
"""
