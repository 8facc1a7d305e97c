"""Rebuild a run's report without running anything.

    python -m autotune.report outputs/2026-12-03/10-00-00 [--out DIR]
    python -m autotune.report outputs/autotune.db --study NAME --out DIR
"""
from pathlib import Path

from autotune.results.page import write_report


def main(argv=None) -> int:
    """Rebuild report.html and pareto.png from a run directory or study, print the summary."""
    import sys

    from autotune.results.headline import headline
    from autotune.results.outputs import summary
    from autotune.results.review import ReviewError, open_reviewed, path_arguments, scored_for_report
    from autotune.scoring.budgets import budgets_summary, budgets_table
    from autotune.store.storage import StorageError

    ap = path_arguments("Rebuild report.html and pareto.png of a run or study, and print its summary.")
    ap.add_argument("--out", help="where to write them (default: the run directory; for a storage, the "
                                  "directory holding it)")
    args = ap.parse_args(argv)
    try:
        reviewed = open_reviewed(args.path, args.study)
    except (ReviewError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (reviewed.run_dir or Path(args.path).resolve().parent)
    out.mkdir(parents=True, exist_ok=True)
    results = reviewed.results()
    primary = results[0]
    record = reviewed.record.scored_by(reviewed.scoring).but(
        why=primary.why if primary.best is not None else None, left_out=reviewed.left_out)
    if reviewed.left_out:
        print(reviewed.left_out)
    path = write_report(out, scored_for_report(results), primary.best, primary.baseline, record,
                        budgets_table(results) if len(results) > 1 else None)
    print(summary(primary.scored, primary.best, reviewed.scoring.objective, record.why))
    if len(results) > 1:
        print(budgets_summary(results))
    print(f"report: {path}")
    print("\n" + "\n".join(headline(primary.scored, primary.best, primary.baseline, reviewed.scoring.objective,
                                    reviewed.scoring.primary_budget, reviewed.scoring.global_batch,
                                    str(record.device_name))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
