"""Floor 3, pure scoring: pandas tables in, scores out (fit, ROI, Pareto front, budgets,
each strategy's effect). No I/O, no processes."""
