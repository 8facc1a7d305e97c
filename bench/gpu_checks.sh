#!/usr/bin/env bash
# The GPU tests on the device machine, from the project root, after the wheel install line
# (README, "GPU"); each part fits one 10-minute call:
#   bash bench/gpu_checks.sh core OUT          # pytest -m gpu tests/test_gpu.py
#   bash bench/gpu_checks.sh model-state OUT   # pytest -m gpu tests/test_gpu_model_state.py
#   K="probe or oom" bash bench/gpu_checks.sh core OUT   # a subset
set -u
export PYTHONUNBUFFERED=1
out=$2
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' >> "$out/gpu.txt"
git log -1 --format='code: %H' >> "$out/gpu.txt" 2>/dev/null || true
case "$1" in
  core) file=tests/test_gpu.py ;;
  model-state) file=tests/test_gpu_model_state.py ;;
  *) echo "usage: bash bench/gpu_checks.sh core|model-state OUT" >&2; exit 2 ;;
esac
# K: a pytest -k expression for a subset (what fits the device time left)
timeout -s TERM "${LIMIT_S:-540}" python3 -m pytest -m gpu -v -p no:cacheprovider --durations=0 ${K:+-k "$K"} "$file" 2>&1 \
  | tee "$out/pytest-$1.log" | tail -30
