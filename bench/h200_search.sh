#!/usr/bin/env bash
# search=auto on BERT-large under each memory budget given, on one NVIDIA H200, with the
# space and settings of the committed grid run (docs/examples/bert-large-h200-budgets/:
# search_spaces/budgets.yaml, objective=throughput, no re-measurement), so
# bench/search_h200_table.py can set auto's trials and wall time against the grid's.
# Not run yet (the session that wrote it had no device time left). Run from the project
# root on the device machine, after the wheel install line:
#   bash bench/h200_search.sh OUT 40 24 16
set -u
export PYTHONUNBUFFERED=1
out=$1; shift
for budget in "$@"; do
  run=/tmp/auto-${budget}GiB
  start=$(date +%s.%N)
  python3 -m autotune model=bert-large budget_gib=$budget search=auto search_space=default \
    search_space.path=search_spaces/budgets.yaml search_space.name=budgets objective=throughput \
    trial.repeats=0 hydra.run.dir=$run > $run.log 2>&1
  echo "exit $? wall_s $(echo "$(date +%s.%N) - $start" | bc)" >> $run.log
  tail -4 $run.log
  cp $run.log $run/tune.log
  tar -C /tmp -czf "$out/auto-${budget}GiB.tar.gz" --exclude='trials/*/spec.json' auto-${budget}GiB
done
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
} > "$out/gpu.txt" 2>&1
