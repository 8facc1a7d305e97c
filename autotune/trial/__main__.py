"""``python -m autotune.trial SPEC.json``: run one trial in this process (see ``run.py``)."""
from autotune.trial.run import main

raise SystemExit(main())
