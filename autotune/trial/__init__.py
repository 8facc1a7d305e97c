"""Floor 2, the trial process: one trial in a process of its own (``python -m autotune.trial
SPEC.json``), the check that it starts clean, the fork server, and the runners that launch trials
and turn whatever happens to them into a recorded result."""
