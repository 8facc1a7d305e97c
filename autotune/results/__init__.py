"""Floor 6, results: the tables and tuned config a run writes, the HTML report and its plots,
and reading a finished study back for ``show`` and ``report``."""
