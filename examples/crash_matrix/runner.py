"""The crash matrix, run from a checkout: ``python examples/crash_matrix/runner.py``.

The matrix ships in the package, ``src/effect_broker/demo/crash_matrix/`` (so that
``effect-broker demo crash-matrix`` runs from an installed wheel in any folder). Read
it there, one module per job: ``verdicts.py`` (the rules each cell is judged by),
``scenarios.py`` (what each scenario breaks), ``cells.py`` and ``processes.py`` (the
real processes), ``ledger.py`` (the SQL that reads the effect back), ``matrix.py``,
``report.py``, and ``routes.yaml`` (the contracts under test). The scripted agent is
``agent.py`` beside them.

Options: ``--mode``, ``--scenario`` (repeatable), ``--parallel``, ``--workdir``,
``--database-url``, ``--sabotage fresh-downstream-key``.
"""

from effect_broker.demo.crash_matrix import main

if __name__ == "__main__":
    raise SystemExit(main())
