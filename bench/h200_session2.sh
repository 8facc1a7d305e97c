#!/usr/bin/env bash
# The H200 check of search=auto's offload bound (fact 6) and track_memory. Run from the
# project root on the device machine, after the wheel install line:
#   bash bench/h200_session2.sh OUT
# (The warm-worker test it selected left with the warm worker; the other two remain.)
# Outputs: OUT/pytest-gpu-session2.log and OUT/auto-16GiB-fresh5.tar.gz (bench/h200_search.sh).
set -u
out=$1
timeout 100 python3 -m pytest -m gpu tests/test_gpu.py -v -p no:cacheprovider \
  -k "offload_lower_peak or warm_worker or track_memory" 2>&1 | tail -8 | tee "$out/pytest-gpu-session2.log"
# As the committed grid was measured: fresh processes, 5 timed steps.
TAG=fresh5 EXTRA="trial.isolation=fresh trial.measure_steps=5 trial.min_measure_s=0" BUDGET_TIMEOUT_S=110 \
  bash bench/h200_search.sh "$out" 16
