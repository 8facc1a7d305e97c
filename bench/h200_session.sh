#!/usr/bin/env bash
# The GPU commands behind benchmarks/bert-large-h200-2026-12-02/, run on one NVIDIA H200 (the
# device machine), from the project root, after installing the missing wheels (see
# README, "GPU"). Phases, so a long tuning run can span several calls of 10 minutes:
#   bash bench/h200_session.sh tests OUT    # pytest -m gpu
#   bash bench/h200_session.sh start        # python -m autotune model=bert-large, in the background
#   bash bench/h200_session.sh wait SECS    # until the run ends or SECS pass
#   bash bench/h200_session.sh train OUT    # examples/train.py on its best.yaml, 50 steps
#   bash bench/h200_session.sh collect OUT  # copy the run's outputs to OUT
set -u
export PYTHONUNBUFFERED=1
run=/tmp/autotune-run
case "$1" in
  tests)
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$2/pytest-gpu.log" | tail -15 ;;
  start)
    [ -e $run.rc ] || [ -e $run.started ] || {
      touch $run.started
      setsid nohup bash -c "python3 -m autotune model=bert-large hydra.run.dir=$run > $run.log 2>&1; echo \$? > $run.rc" \
        >/dev/null 2>&1 < /dev/null &
    } ;;
  wait)
    end=$((SECONDS + $2))
    while [ ! -e $run.rc ] && [ $SECONDS -lt $end ]; do sleep 5; done
    tail -5 $run.log; [ -e $run.rc ] && echo "tune exit code $(cat $run.rc)" ;;
  train)
    [ -e $run/best.yaml ] && python3 examples/train.py $run/best.yaml --steps 50 2>&1 | tee "$2/train.log" | tail -3 ;;
  collect)
    cp $run.log "$2/tune.log" 2>/dev/null
    for f in best.yaml trials.csv pareto.csv report.html pareto.png; do cp $run/$f "$2/" 2>/dev/null; done
    tar -C $run -czf "$2/run-extra.tar.gz" .hydra autotune.log study.db trials 2>/dev/null
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$2/gpu.txt" 2>&1
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' >> "$2/gpu.txt"
    ls -la "$2" ;;
esac
