#!/usr/bin/env bash
# Issue 15's GPU checks, on the device machine from the project root, after the wheel
# install line (README, "GPU"):
#   bash bench/h200_front.sh contention OUT   # a trial beside a second process computing on the GPU
#   bash bench/h200_front.sh front OUT SECS   # python -m autotune model=bert-large budget_gib=24
#   bash bench/h200_front.sh tests OUT        # pytest -m gpu
# "front" runs the default search (auto, search.front_resolution=0.1) with its study in
# gpu-resume/bert-large-24.db and search.timeout=SECS, so that it fits one 10-minute call:
# the same command in the next call resumes the study (nothing is measured twice) until
# the search ends by itself; the last call's OUT/bert-large-24 holds the outputs.
set -u
export PYTHONUNBUFFERED=1
out=$2
case "$1" in
  contention)
    python3 -m pytest -m gpu -s -v -p no:cacheprovider tests/test_gpu.py -k shares_the_gpu 2>&1 \
      | tee "$out/contention-gpu.log" | tail -40 ;;
  front)
    mkdir -p gpu-resume
    timeout $(($3 + 170)) python3 -m autotune model=bert-large budget_gib=24 "search.timeout=$3" \
      storage=sqlite:///gpu-resume/bert-large-24.db "hydra.run.dir=$out/bert-large-24" 2>&1 \
      | tee "$out/bert-large-24.log" | grep -v "^\[.*running\|elapsed" | tail -40
    cp gpu-resume/bert-large-24.db "$out/"
    tar -C "$out" -czf "$out/bert-large-24.tar.gz" bert-large-24 && rm -rf "$out/bert-large-24" ;;
  tests)
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$out/pytest-gpu.log" | tail -15 ;;
esac
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' >> "$out/gpu.txt"
