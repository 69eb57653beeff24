#!/usr/bin/env bash
# Recipe 2 (b) of shared/reference/recipes.md (AGP level 0.8 over 3 epochs from the dense (a)
# model) run two ways on this machine, alternating, twice each:
#   one process  × 2 libtorch threads, batch 64;
#   two ranks    × 1 thread each (lithe launch --nproc 2, c10d/Gloo on loopback), batch 32
#   per rank (the same 64 samples per step, the same data order).
# Prints accuracy per epoch, the training-loop seconds per epoch (rank 0's, from --json) and the
# whole command's wall time. Needs a build (scripts/build.sh). Usage: scripts/bench-distributed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${LITHE_BENCH_DIR:-build/bench}"
MODEL="${LITHE_RECIPE2_MODEL:-tests/data/nni/models/lenet.pt}"
mkdir -p "$WORK"
lithe=build/bin/lithe
sgd=(--optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4 --seed 0)
cat > "$WORK/agp_0.8.json" <<'JSON'
{"algorithm": "agp", "options": {"pruning_algorithm": "level"},
 "config_list": [{"initial_sparsity": 0.0, "final_sparsity": 0.8, "start_epoch": 0,
                  "end_epoch": 3, "frequency": 1, "op_types": ["default"]}]}
JSON
if [ ! -f "$WORK/recipe2_a.pt" ]; then
  echo "== (a) dense, 2 epochs from the initial weights (the starting point of (b))"
  "$lithe" train --model "$MODEL" --epochs 2 "${sgd[@]}" --batch-size 64 --threads 2 \
    --output "$WORK/recipe2_a.pt" --json > /dev/null
fi

report() {  # $1 label, $2 wall seconds; --json summary on stdin
  python3 -c 'import json,sys
d = json.load(sys.stdin)
acc = ", ".join("%.4f" % e["test"]["accuracy"] for e in d["epochs"])
secs = ", ".join("%.2f" % e["seconds"] for e in d["epochs"])
p = sum(l["params"] for l in d["layers"]); z = sum(l["pruned"] for l in d["layers"])
print("%-26s accuracy %s | epoch %s s | wall %s s | sparsity %.6f" % (sys.argv[1], acc, secs, sys.argv[2], z / p))' "$1" "$2"
}
run() {  # $1 label, then the command
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  "$@" > "$WORK/dist_bench.json"
  end=$(date +%s.%N)
  report "$label" "$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}')" \
    < "$WORK/dist_bench.json"
}
common=(compress --model "$WORK/recipe2_a.pt" --config "$WORK/agp_0.8.json" --epochs 3 "${sgd[@]}"
        --json)
for round in 1 2; do
  run "1 process x 2 threads" "$lithe" "${common[@]}" --batch-size 64 --threads 2 \
    --output "$WORK/dist_single.pt"
  run "2 ranks x 1 thread" "$lithe" launch --nproc 2 -- "${common[@]}" --batch-size 32 \
    --threads 1 --output "$WORK/dist_two.pt"
done
echo "max |w(2 ranks) - w(1 process)|: $(/usr/bin/python3 -c 'import sys, torch
a = torch.jit.load(sys.argv[1]).state_dict(); b = torch.jit.load(sys.argv[2]).state_dict()
print("%.3g" % max((a[k] - b[k]).abs().max().item() for k in a))' "$WORK/dist_single.pt" "$WORK/dist_two.pt" 2>/dev/null || echo "n/a (needs python3-torch)")"
