"""The demo payment target, run from a checkout: ``python examples/payment_target.py``.

The code lives in the package, ``src/effect_broker/demo/payment_target/`` (so that an
installed wheel has it too: ``effect-broker up --demo`` starts it with
``python -m effect_broker.demo.payment_target``). Read it there:

* ``charges.py``: the authoritative SQLite ``charges`` table, one charge per live
  idempotency key, keys that expire, the lookup by correlation id;
* ``app.py``: ``POST /idempotent|reconcilable|unsafe/v1/charges``, ``GET /charges``,
  and the ``/_faults`` switch that commits a charge and then loses the answer;
* ``command.py``: the command line.

Run it::

    python examples/payment_target.py --port 9000 --db /tmp/payments.sqlite3
"""

from effect_broker.demo.payment_target import main

if __name__ == "__main__":
    main()
