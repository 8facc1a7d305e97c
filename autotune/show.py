"""Print the best configuration for each objective and budget of a study, without running it.

    python -m autotune.show outputs/2026-12-03/10-00-00          # a run directory
    python -m autotune.show outputs/autotune.db --study NAME      # a study in a storage
    python -m autotune.show RUN --budget 16 --budget 24           # other budgets, same trials
"""
from __future__ import annotations

import sys

import pandas as pd

from autotune.results.review import ReviewError, open_reviewed, path_arguments
from autotune.scoring.score import OBJECTIVES
from autotune.store.storage import StorageError
from autotune.train.dimensions import tags
from autotune.train.strategy import Strategy


def best_lines(reviewed, budgets=None) -> list:
    lines = []
    for objective in OBJECTIVES:
        for r in reviewed.results(objective, budgets):
            head = f"{objective:>10} @ {r.budget_gib:g} GiB: "
            if r.best is None:
                lines.append(head + f"nothing fits ({r.why})")
                continue
            b = r.scored.loc[r.best]
            roi = f", ROI {b['roi']:.2f}" if pd.notna(b.get("roi")) else ""
            lines.append(head + " ".join(tags(Strategy.of(b).as_dict(), "key"))
                         + f" ({b['peak_memory_gib']:.2f} GiB, {b['samples_per_s']:.1f} samples/s{roi}; trial "
                         f"{int(b['number'])})")
    return lines


def main(argv=None) -> int:
    ap = path_arguments(__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, action="append",
                    help="judge against this budget in GiB instead of the run's (repeatable)")
    args = ap.parse_args(argv)
    if args.budget and any(b <= 0 for b in args.budget):
        ap.error(f"--budget {min(args.budget):g}: a budget must be > 0 GiB")
    try:
        reviewed = open_reviewed(args.path, args.study)
    except (ReviewError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    counts = reviewed.table["status"].value_counts()
    print(f"{reviewed.source}" + (f" (study '{reviewed.study_name}')" if reviewed.study_name else "")
          + f": {len(reviewed.table)} trials (" + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f"), global batch {reviewed.scoring.global_batch}; the run's objective: {reviewed.scoring.objective}")
    if reviewed.left_out:
        print(reviewed.left_out)
    print("\n".join(best_lines(reviewed, args.budget)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
