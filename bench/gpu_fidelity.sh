#!/usr/bin/env bash
# Issue 29's GPU checks (multi-fidelity trials), on the device machine from the project root,
# after the wheel install line (README, "GPU"). Each part fits one 10-minute call:
#   bash bench/gpu_fidelity.sh default OUT  # bert-large at 24 GiB and llama at 16 GiB, defaults
#                                           # otherwise, each timed from the command to best.yaml;
#                                           # then the GPU test of the probe's peak
#   bash bench/gpu_fidelity.sh bert OUT     # bert-large at 24 GiB alone (a repeat, another machine)
#   bash bench/gpu_fidelity.sh grid OUT     # llama at 16 GiB: the fresh-process grid of the
#                                           # default space, every trial in full (the reference);
#                                           # GRID_LIMIT_S, GRID_SEARCH_S: its limits (560, 480 s)
#   bash bench/gpu_fidelity.sh budgets OUT  # the pinned-memory bench (bench/pinned_alloc.py; SKIP_PINNED=1 skips it), then
#                                           # experiment=bert_large_budgets as a grid, every trial
#                                           # in full: the replay's offload table, today's code
#   bash bench/gpu_fidelity.sh budgets-offload OUT  # its 9 offload configurations alone
set -u
export PYTHONUNBUFFERED=1
out=$2
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' >> "$out/gpu.txt"

timed() {  # NAME ARGS...: python -m autotune ARGS into OUT/NAME, wall time and load into OUT/NAME.time
  local name=$1; shift
  local start; start=$(date +%s.%N)
  uptime > "$out/$name.time"
  # each part at most TIMED_LIMIT_S (a stop writes the outputs of what finished), so all fit one call
  timeout -s TERM "${TIMED_LIMIT_S:-220}" python3 -m autotune "$@" "hydra.run.dir=$out/$name" \
    "storage=sqlite:///$out/$name.db" > "$out/$name.log" 2>&1
  local rc=$?
  echo "exit $rc; seconds from the command to its end: $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 1))" "$(date +%s.%N)" "$start")" >> "$out/$name.time"
  echo "best.yaml written at: $(stat -c %Y "$out/$name/best.yaml" 2>/dev/null), start $start" >> "$out/$name.time"
  uptime >> "$out/$name.time"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$out/$name.time" 2>&1
  grep -v "^\s*\.\.\." "$out/$name.log" | tail -25
  cat "$out/$name.time"
}

case "$1" in
  default)
    timed bert-large-24 model=bert-large budget_gib=24
    timed llama-16 model=llama budget_gib=16
    python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k "probe" 2>&1 | tee "$out/pytest-probe.log" | tail -8 ;;
  bert)
    timed bert-large-24 model=bert-large budget_gib=24 ;;
  grid)
    TIMED_LIMIT_S=${GRID_LIMIT_S:-560} timed llama-16-grid model=llama budget_gib=16 search=grid trial.fidelity=full trial.repeats=0 \
      search.timeout=${GRID_SEARCH_S:-480} ;;
  budgets)
    [ -n "${SKIP_PINNED:-}" ] || python3 bench/pinned_alloc.py --gib 16 --out "$out/pinned_alloc.json" 2>&1 | tail -5
    TIMED_LIMIT_S=${GRID_LIMIT_S:-470} timed budgets-grid experiment=bert_large_budgets search=grid trial.fidelity=full \
      search.timeout=${GRID_SEARCH_S:-420} ;;
  budgets-offload)  # the offload half of the budgets grid alone (pinning: strategy.PINNED_FAST)
    TIMED_LIMIT_S=${GRID_LIMIT_S:-300} timed budgets-offload experiment=bert_large_budgets search=grid \
      trial.fidelity=full "search_space.offload=[true]" search.timeout=${GRID_SEARCH_S:-270} ;;
esac
# At most 8 files come back from the device machine: one archive per run (its directory,
# log, timing and study), beside gpu.txt and the pytest log.
for d in "$out"/*/; do
  [ -d "$d" ] || continue
  name=$(basename "$d")
  rm -f "$out/$name.db.lock"
  tar -C "$out" -czf "$out/$name.tar.gz" "$name" $(cd "$out" && ls "$name.log" "$name.time" "$name.db" 2>/dev/null) \
    && rm -rf "$d" "$out/$name.log" "$out/$name.time" "$out/$name.db"
done
