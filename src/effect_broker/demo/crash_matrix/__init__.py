"""The crash matrix: real processes, killed at every point that matters, counted.

A local journal cannot tell "the request never arrived" from "the target committed and
the answer was lost". This runner shows what effect-broker does about that, with nothing
simulated: for every safety class (the demo payment target's ``idempotent``,
``reconcilable``, ``unsafe`` and ``transactional`` modes) and every scenario below, it
starts a fresh target process (its own SQLite file; in transactional mode a PostgreSQL
database of its own, written with the target kit), a fresh ledger database and the real
proxy
process (the ``effect-broker serve`` command, configured by environment), breaks
something, lets the scripted agent retry with the same ``Operation-Key``, waits until
the ledger has settled as far as the proof allows, and then counts the rows in the
*target's own* ``charges`` table. That count is the ground truth.

Scenarios:

* the failpoints (``before_reserve_commit`` ... ``after_receipt_commit``, and
  ``in_reserve_batch`` / ``in_receipt_batch`` inside a group commit, after the batch's
  statement committed and before any of its requests is answered): the proxy is
  started with ``EFFECT_BROKER_FAILPOINTS`` set and kills itself there (exit 86, no
  cleanup, like SIGKILL); it is restarted unarmed on the same ports and the agent's
  retry goes to the new process;
* ``sigkill-in-flight``: the target commits and never answers; once its table shows the
  row the proxy gets SIGKILL. The classic "target committed, response lost";
* ``10-concurrent``: ten agents at once with the same key and no failure at all;
* ``zombie``: as above, but the proxy is frozen (SIGSTOP) instead of killed; a second
  proxy takes the effect over once the first one's lease is past and settles it; then the
  first wakes up (SIGCONT) and its late write must be fenced (refused by version);
* ``tombstone-race`` (transactional only): the target makes the charge and holds its
  transaction open before the kit's receipt; the proxy's attempt times out, its lookup
  finds nothing and its tombstone commits; only then is the held transaction let go,
  and its receipt INSERT must fail, taking the charge with it. The next attempt, under
  the next attempt key, charges once;
* ``commit-race`` (transactional only): the receipt is written and the COMMIT held; the
  tombstone must wait (and give up, inconclusive) until the commit goes through, then
  the lookup finds it: one attempt, its receipt from the lookup, nothing resent;
* ``naive``: no proxy. The agent's naive mode (fresh key per attempt, 1 s timeout)
  against a target that withholds one answer: the double charge this project exists for.

Verdict rules (``judge``), where any broken rule is a violation and the exit status 1:

* idempotent, reconcilable and transactional: exactly one charge in every proxy
  scenario, the effect ``succeeded`` with a receipt, and the agent got a 2xx; in
  ``tombstone-race`` the history holds the tombstone's proof (``absence_proven``) and
  a second attempt, in ``commit-race`` exactly one attempt and a ``lookup`` receipt;
* unsafe: never more than one charge. Where the outcome is ambiguous (the request may
  have reached the target: ``before_upstream_send``, ``after_upstream_response``,
  ``sigkill-in-flight``, ``zombie``) the effect must end ``outcome_unknown`` and the agent
  must have been told so; elsewhere the proxy knows nothing was sent, so one charge;
* a scenario whose receipt was committed before the crash (``after_receipt_commit``)
  must replay that receipt; ten concurrent agents get one answer, replayed to nine;
* zombie: the frozen proxy's late write was fenced (its
  ``effect_broker_fenced_writes_total`` > 0) and the ledger stays as the second proxy
  left it;
* naive: two or more charges is the expected, demonstrated failure ("duplicate
  (expected: no proxy)"). A naive run *without* a duplicate is the violation: the demo
  would prove nothing.

Routes come from ``routes.yaml`` in this package, a valid routes file for a target on
port 9000; each cell gets a copy whose upstream origins point at its own target.

Run it (starts an embedded PostgreSQL unless ``--database-url`` names a server on which
it may create and drop databases)::

    effect-broker demo crash-matrix
    python -m effect_broker.demo.crash_matrix     # the same, with --mode/--scenario

The code is split by job: ``verdicts`` (scenario names, what a cell saw, the rules),
``processes`` (child processes, the target and proxy handles), ``ledger`` (reading the
effect's row and history with SQL of its own), ``cells`` (starting one cell's
processes), ``scenarios`` (what each scenario breaks), ``matrix`` (databases, running
cells in parallel), ``report`` (the table) and ``command`` (the command line).

``CRASH_MATRIX_SABOTAGE=fresh-downstream-key`` (or ``--sabotage``) starts every proxy
with its stable downstream key replaced by a random one per attempt, patched in at
process start without touching the proxy's code: a deliberately broken proxy, to show
that the matrix turns red when the promise is broken.
"""

from effect_broker.demo.crash_matrix import agent
from effect_broker.demo.crash_matrix.command import main
from effect_broker.demo.crash_matrix.ledger import Ledger
from effect_broker.demo.crash_matrix.matrix import SABOTAGES, run_matrix
from effect_broker.demo.crash_matrix.report import render, report
from effect_broker.demo.crash_matrix.verdicts import (
    AMBIGUOUS,
    COMMIT_RACE,
    CONCURRENT,
    CONCURRENT_AGENTS,
    MODES,
    NAIVE,
    SCENARIOS,
    SIGKILL_IN_FLIGHT,
    SIGKILL_MID_STREAM,
    TOMBSTONE_RACE,
    TRANSACTIONAL,
    ZOMBIE,
    CellResult,
    MatrixResult,
    Observation,
    applies,
    cell_count,
    judge,
)

__all__ = [
    "AMBIGUOUS",
    "COMMIT_RACE",
    "CONCURRENT",
    "CONCURRENT_AGENTS",
    "MODES",
    "NAIVE",
    "SABOTAGES",
    "SCENARIOS",
    "SIGKILL_IN_FLIGHT",
    "SIGKILL_MID_STREAM",
    "TOMBSTONE_RACE",
    "TRANSACTIONAL",
    "ZOMBIE",
    "CellResult",
    "Ledger",
    "MatrixResult",
    "Observation",
    "agent",
    "applies",
    "cell_count",
    "judge",
    "main",
    "render",
    "report",
    "run_matrix",
]
