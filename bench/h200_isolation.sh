#!/usr/bin/env bash
# The GPU runs that check the default trial mechanism (every trial a fresh process forked
# from a pre-imported server) against new interpreters, on one NVIDIA H200 (the device
# machine), from the project root, after the wheel install line (CONTRIBUTING: GPU runs).
# The steps run in the background, so they can span several calls of 10 minutes:
#   bash bench/h200_isolation.sh start STEP...   # in this order; steps:
#       gpu-tests                 pytest -m gpu
#       auto-bert-large-24        python -m autotune model=bert-large budget_gib=24 (defaults),
#                                 then every trial again in a new interpreter (isolation_check.py)
#       auto-llama-16             the same for model=llama budget_gib=16
#       auto-bert-large-16/-40    python -m autotune model=bert-large budget_gib=16 (or 40)
#       grid-bert-large-24        the same as auto-bert-large-24 with search=grid
#       grid-bert-large-24-rest   the new-interpreter check of the committed grid run at 24 GiB
#                                 (benchmarks/isolation-h200-2026-12-04/grid-bert-large-24), resumed where
#                                 the device time ran out: the trials its isolation_check.json lacks
#       control-grid-24           the control for the grid check's speed disagreements: each of
#                                 those trials in two new interpreters, compared with each other
#                                 (isolation_check.py --control): are two fresh processes as far
#                                 apart as the fork server and a new interpreter were?
#       grid-bert-large-budgets   python -m autotune model=bert-large search=grid budget_gib=[16,24,40]
#                                 (every trial capped at 40 GiB; the winner of each budget)
#   ONLY=037,047 (control-grid-24) and GPU_TESTS='not full_size' (gpu-tests, pytest -k)
#   narrow a step to fit the device time left.
#   bash bench/h200_isolation.sh wait SECS       # until every step has ended or SECS pass
#   bash bench/h200_isolation.sh collect OUT     # OUT/isolation.tar.gz: logs, run directories
# Each step writes /tmp/iso/STEP/ (tune.log, run/, check.log, cost.log) and a study storage
# of its own, so a rerun measures again instead of resuming.
set -u
export PYTHONUNBUFFERED=1
base=/tmp/iso
mkdir -p $base

tune_and_check() {  # STEP CHECK(yes|no) OVERRIDES...
  local w=$base/$1 check=$2; shift 2
  mkdir -p "$w"
  python3 -m autotune "$@" storage=sqlite:///$w/study.db hydra.run.dir=$w/run > "$w/tune.log" 2>&1
  echo "tune exit $?" >> "$w/tune.log"
  python3 bench/trial_cost.py "$w/run" --out "$w/cost.json" > "$w/cost.log" 2>&1
  [ "$check" = yes ] && python3 bench/isolation_check.py "$w/run" > "$w/check.log" 2>&1
  return 0
}

step() {
  case "$1" in
    gpu-tests) mkdir -p $base/gpu-tests
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py ${GPU_TESTS:+-k "$GPU_TESTS"} \
        > $base/gpu-tests/pytest-gpu.log 2>&1 ;;
    auto-bert-large-24) tune_and_check "$1" yes model=bert-large budget_gib=24 ;;
    auto-llama-16) tune_and_check "$1" yes model=llama budget_gib=16 ;;
    auto-bert-large-16) tune_and_check "$1" no model=bert-large budget_gib=16 ;;
    auto-bert-large-40) tune_and_check "$1" no model=bert-large budget_gib=40 ;;
    grid-bert-large-24) tune_and_check "$1" yes model=bert-large budget_gib=24 search=grid ;;
    grid-bert-large-24-rest) mkdir -p $base/$1
      cp -r benchmarks/isolation-h200-2026-12-04/grid-bert-large-24 $base/$1/run
      python3 bench/isolation_check.py $base/$1/run --resume > $base/$1/check.log 2>&1 ;;
    control-grid-24) mkdir -p $base/$1
      cp -r benchmarks/isolation-h200-2026-12-04/grid-bert-large-24 $base/$1/run
      python3 bench/isolation_check.py $base/$1/run --control \
        --only "${ONLY:-005,010,020,026,037,038,041,043,047,007,023,045}" > $base/$1/check.log 2>&1 ;;
    grid-bert-large-budgets) tune_and_check "$1" no model=bert-large search=grid 'budget_gib=[16,24,40]' ;;
    *) echo "unknown step $1" ;;
  esac
}

case "$1" in
  start)
    shift
    [ -e $base/started ] && { echo "already started"; exit 0; }
    date +%s > $base/started
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
      git log -1 --format='commit %H' 2>/dev/null; } > $base/gpu.txt 2>&1
    steps="$*"
    setsid nohup bash -c "for s in $steps; do echo \"\$(date +%T) \$s\" >> $base/progress; bash $0 step \$s; done; \
      echo \"\$(date +%T) done\" >> $base/progress; touch $base/done" > $base/queue.log 2>&1 < /dev/null & ;;
  step) step "$2" ;;
  wait)
    end=$((SECONDS + $2))
    while [ ! -e $base/done ] && [ $SECONDS -lt $end ]; do sleep 5; done
    cat $base/progress; for f in $base/*/tune.log; do echo "== $f"; tail -3 "$f"; done
    tail -3 $base/gpu-tests/pytest-gpu.log 2>/dev/null ;;
  collect)
    tar -C /tmp -czf "$2/isolation.tar.gz" --exclude='*.db' iso
    ls -la "$2" ;;
esac
