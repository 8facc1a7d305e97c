#!/usr/bin/env bash
# BERT-large under memory budgets of 16, 24 and 40 GiB on one NVIDIA H200, then the
# 16 GiB winner trained for 50 steps under the same cap (a simulated 16 GiB card).
# Run from the project root on the device machine, after the wheel install line:
#   bash bench/h200_budgets.sh OUT
# Outputs land in OUT and are committed under benchmarks/bert-large-budgets-h200-2026-12-03/.
set -u
export PYTHONUNBUFFERED=1
out=$1
run=/tmp/bert-large-budgets
# A time limit keeps the training check inside one device call: SIGTERM makes the driver
# write its outputs from the trials finished so far (the README says so).
# experiment=bert_large_budgets: model=bert-large search_space=budgets budget_gib=[16,24,40]
# objective=throughput trial.repeats=0 (autotune/conf/experiment/bert_large_budgets.yaml).
timeout 440 python3 -m autotune experiment=bert_large_budgets hydra.run.dir=$run 2>&1 | tee "$out/tune.log" | tail -25
[ -e $run/best-16GiB.yaml ] && timeout 100 python3 examples/train.py $run/best-16GiB.yaml --steps 50 2>&1 | tee "$out/train-16GiB.log" | tail -3
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
} > $run/gpu.txt 2>&1
# At most 8 files come back from the device: the run's outputs travel as one archive.
tar -C $run -czf "$out/run.tar.gz" .
ls -la "$out"
