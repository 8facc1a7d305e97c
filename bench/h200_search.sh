#!/usr/bin/env bash
# search=auto on BERT-large under each memory budget given, on one NVIDIA H200, with the
# space and settings of the committed grid run (benchmarks/bert-large-budgets-h200-2026-12-03/:
# search_space=budgets, objective=throughput, no re-measurement), so
# bench/search_h200_table.py can set auto's trials and wall time against the grid's.
# Run from the project root on the device machine, after the wheel install line:
#   bash bench/h200_search.sh OUT 40 24 16
#   TAG=fresh EXTRA="trial.isolation=fresh" bash bench/h200_search.sh OUT 24
# Each run has a study storage of its own (a rerun measures again, never resumes).
# Each budget's run directory comes back as OUT/auto-<budget>GiB[-TAG].tar.gz.
set -u
export PYTHONUNBUFFERED=1
out=$1; shift
tag=${TAG:+-$TAG}
for budget in "$@"; do
  name=auto-${budget}GiB$tag
  run=/tmp/$name
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # EXTRA holds several overrides
  timeout ${BUDGET_TIMEOUT_S:-280} python3 -m autotune model=bert-large budget_gib=$budget search=auto \
    search_space=budgets objective=throughput trial.repeats=0 storage=sqlite:///$run.db ${EXTRA:-} hydra.run.dir=$run > $run.log 2>&1
  echo "exit $? wall_s $(python3 -c "import time; print(round(time.time() - $start, 1))")" >> $run.log
  tail -4 $run.log
  cp $run.log $run/tune.log
  tar -C /tmp -czf "$out/$name.tar.gz" --exclude='trials/*/spec.json' $name
done
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
} > "$out/gpu.txt" 2>&1
