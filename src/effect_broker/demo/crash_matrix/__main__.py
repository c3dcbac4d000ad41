"""``python -m effect_broker.demo.crash_matrix``: run the crash matrix."""

from effect_broker.demo.crash_matrix.command import main

raise SystemExit(main())
