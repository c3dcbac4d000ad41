"""Example applications that ship with effect-broker: what a new user runs first.

``payment_target`` is a demo payment service whose own SQLite table proves how many
charges happened; ``crash_matrix`` kills the proxy at every failpoint in front of it and
counts those charges. They live in the package, not only in a checkout's ``examples/``,
so that ``effect-broker up --demo`` and ``effect-broker demo crash-matrix`` work from an
installed wheel in any folder. They sit on top of the public surface (the ``serve``
command, migrations, failpoint names) and nothing in the proxy imports them.

``routes.yaml`` here is the starter routes file: ``effect-broker init`` copies it into
the current folder, and ``up --demo`` serves it when the folder has none.
"""
