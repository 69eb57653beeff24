#!/usr/bin/env bash
# Recipe 2 (a)-(d) of shared/reference/recipes.md, exactly: Debian's Fashion-MNIST, the
# conformance LeNet with its weights, SGD lr 0.01 / momentum 0.9 / weight decay 5e-4 created
# fresh per sub-recipe, a CPU generator seeded 0 whose e-th randperm orders epoch e, batches of
# 64 (last one 32), test batches of 1000 in file order. Prints the numbers BENCHMARKS.md quotes.
# Needs a build (scripts/build.sh). Usage: scripts/bench-recipe2.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${LITHE_BENCH_DIR:-build/bench}"
MODEL="${LITHE_RECIPE2_MODEL:-tests/data/nni/models/lenet.pt}"
mkdir -p "$WORK"
lithe=build/bin/lithe
sgd=(--optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4 --batch-size 64 --seed 0
     --threads "${LITHE_THREADS:-0}")

agp_config() {  # $1 final sparsity
  cat > "$WORK/agp_$1.json" <<JSON
{"algorithm": "agp", "options": {"pruning_algorithm": "level"},
 "config_list": [{"initial_sparsity": 0.0, "final_sparsity": $1, "start_epoch": 0,
                  "end_epoch": 3, "frequency": 1, "op_types": ["default"]}]}
JSON
}
cat > "$WORK/level80.json" <<'JSON'
{"algorithm": "level", "config_list": [{"sparsity": 0.8, "op_types": ["default"]}]}
JSON
agp_config 0.8
agp_config 0.9

# One line per epoch: "accuracy seconds", from a --json summary on stdin.
epochs() {
  python3 -c 'import json,sys
d = json.load(sys.stdin)
for e in d["epochs"]:
    print("%.4f %.3f" % (e["test"]["accuracy"], e["seconds"]))'
}
sparsity() {
  python3 -c 'import json,sys
d = json.load(sys.stdin)
p = sum(l["params"] for l in d["layers"]); z = sum(l["pruned"] for l in d["layers"])
exact = all(l["pruned"] == int(l["params"] * l["target"]) for l in d["layers"])
print("%.6f (%d of %d weights; every layer exactly int(n*s): %s)" % (z / p, z, p, exact))'
}

echo "== before training: $("$lithe" eval --model "$MODEL")"
echo "== (a) dense, 2 epochs from the initial weights"
"$lithe" train --model "$MODEL" --epochs 2 "${sgd[@]}" --output "$WORK/recipe2_a.pt" --json \
  > "$WORK/recipe2_a.json"
epochs < "$WORK/recipe2_a.json"
for s in 0.8 0.9; do
  echo "== (b/c) AGP level to $s over 3 epochs, from (a)"
  "$lithe" compress --model "$WORK/recipe2_a.pt" --config "$WORK/agp_$s.json" --epochs 3 \
    "${sgd[@]}" --output "$WORK/recipe2_agp$s.pt" --json > "$WORK/recipe2_agp$s.json"
  epochs < "$WORK/recipe2_agp$s.json"
  echo "sparsity $(sparsity < "$WORK/recipe2_agp$s.json")"
done

echo "== (d) masking overhead: one plain epoch vs one epoch under Level 0.8 masks, alternating"
plain=()
masked=()
for _ in 1 2 3; do
  plain+=("$("$lithe" train --model "$WORK/recipe2_a.pt" --epochs 1 "${sgd[@]}" \
            --output "$WORK/recipe2_plain.pt" --json | epochs | cut -d' ' -f2)")
  masked+=("$("$lithe" compress --model "$WORK/recipe2_a.pt" --config "$WORK/level80.json" \
             --epochs 1 "${sgd[@]}" --output "$WORK/recipe2_masked.pt" --json | epochs | cut -d' ' -f2)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p=$(median "${plain[@]}")
m=$(median "${masked[@]}")
echo "plain epochs:  ${plain[*]} s (median $p)"
echo "masked epochs: ${masked[*]} s (median $m)"
echo "masked/plain:  $(awk -v a="$m" -v b="$p" 'BEGIN {printf "%.3f", a / b}')"
