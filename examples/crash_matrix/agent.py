"""The crash matrix's scripted agent, run from a checkout.

It lives in the package, ``src/effect_broker/demo/crash_matrix/agent.py``: one charge
for ``order-42``, retried with the same ``Operation-Key`` the way real clients retry,
or naively (``--naive``: a fresh key per attempt and a 1 s timeout). For example::

    python examples/crash_matrix/agent.py --proxy http://127.0.0.1:8080 --mode idempotent
"""

from effect_broker.demo.crash_matrix.agent import main

if __name__ == "__main__":
    main()
