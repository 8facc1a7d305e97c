#!/usr/bin/env bash
# Issue 16's GPU checks, on the device machine from the project root, after the wheel
# install line (CONTRIBUTING.md, "GPU"; torchao's wheel added):
#   bash bench/h200_model_state.sh search OUT SECS  # python -m autotune experiment=llama_1b_16gib
#   bash bench/h200_model_state.sh train OUT        # examples/train.py with its best.yaml, 50 steps
#   bash bench/h200_model_state.sh tests OUT        # pytest -m gpu
#   bash bench/h200_model_state.sh bert OUT SECS    # experiment=bert_large_16gib_state (acceptance 2)
#   bash bench/h200_model_state.sh all OUT SECS     # search (SECS), then train and tests if it ended
# "search" keeps its study in gpu-resume/llama-1b.db and stops starting trials after SECS
# (search.timeout), so that it fits one 10-minute call: the same command in the next call
# resumes it (nothing is measured twice) until the search ends by itself.
set -u
export PYTHONUNBUFFERED=1
out=$2
case "$1" in
  search)
    mkdir -p gpu-resume
    # The partial H100 run's study (benchmarks/model-state-h100-2026-12-06): an H100 resumes
    # it; on another card the study's name (it carries the device) differs and a new one starts.
    [ -f gpu-resume/llama-1b.db ] || cp benchmarks/model-state-h100-2026-12-06/llama-1b.db gpu-resume/
    timeout $(($3 + 200)) python3 -m autotune experiment=llama_1b_16gib "search.timeout=$3" \
      storage=sqlite:///gpu-resume/llama-1b.db "hydra.run.dir=$out/llama-1b" 2>&1 \
      | tee "$out/llama-1b.log" | grep -v "^      \.\.\." | tail -60
    cp gpu-resume/llama-1b.db "$out/" ;;
  train)
    timeout ${3:-400} python3 examples/train.py "$out/llama-1b/best.yaml" --steps 50 2>&1 | tee "$out/train-50.log" | tail -5 ;;
  tests)
    timeout ${3:-560} python3 -m pytest -m gpu -q -p no:cacheprovider ${4:-tests/test_gpu_model_state.py tests/test_gpu.py} 2>&1 \
      | tee "$out/pytest-gpu.log" | tail -25 ;;
  bert)
    mkdir -p gpu-resume
    timeout $(($3 + 150)) python3 -m autotune experiment=bert_large_16gib_state "search.timeout=$3" \
      storage=sqlite:///gpu-resume/bert-large.db "hydra.run.dir=$out/bert-large" 2>&1 \
      | tee "$out/bert-large.log" | grep -v "^      \.\.\." | tail -40
    cp gpu-resume/bert-large.db "$out/" ;;
  all)
    bash "$0" search "$out" "$3"
    # the escalated phase's own end line is the last one
    if grep -E "search 'auto' ended|search stopped" "$out/llama-1b.log" | tail -1 | grep -q ended; then
      bash "$0" train "$out" 150
      bash "$0" tests "$out" 170 tests/test_gpu_model_state.py
    fi ;;
esac
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch, transformers, torchao; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "torchao", torchao.__version__)' >> "$out/gpu.txt"
