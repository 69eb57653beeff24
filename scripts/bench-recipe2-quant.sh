#!/usr/bin/env bash
# Recipe 2 (e) and (f) of shared/reference/recipes.md, exactly, plus BNN and LSQ on the same
# recipe: from the dense model of (a) (trained here if scripts/bench-recipe2.sh has not left it),
# 2 epochs of quantization-aware training with SGD lr 0.01 / momentum 0.9 / weight decay 5e-4,
# batches of 64 in the seeded order, test batches of 1000. The float model is trained the same 2
# epochs from (a) in the same run, so accuracy and the step-time ratio compare like with like.
# Needs a build (scripts/build.sh). Usage: scripts/bench-recipe2-quant.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${LITHE_BENCH_DIR:-build/bench}"
MODEL="${LITHE_RECIPE2_MODEL:-tests/data/nni/models/lenet.pt}"
mkdir -p "$WORK"
lithe=build/bin/lithe
sgd=(--optimizer sgd --lr 0.01 --momentum 0.9 --weight-decay 5e-4 --batch-size 64 --seed 0
     --threads "${LITHE_THREADS:-0}")

quant_config() {  # $1 name, $2 algorithm, $3 quant_types JSON, $4 quant_bits JSON
  cat > "$WORK/$1.json" <<JSON
{"algorithm": "$2",
 "config_list": [{"quant_types": $3, "quant_bits": $4, "op_types": ["Conv2d", "Linear"]}]}
JSON
}
quant_config qat_w8o8 qat '["weight", "output"]' '{"weight": 8, "output": 8}'
quant_config dorefa_w4 dorefa '["weight"]' '{"weight": 4}'
quant_config bnn_w1 bnn '["weight"]' '{"weight": 1}'
quant_config lsq_w8o8 lsq '["weight", "output"]' '{"weight": 8, "output": 8}'

# One line per epoch: "accuracy seconds", from a --json summary on stdin.
epochs() {
  python3 -c 'import json,sys
d = json.load(sys.stdin)
for e in d["epochs"]:
    print("%.4f %.3f" % (e["test"]["accuracy"], e["seconds"]))'
}
last_accuracy() { tail -n 1 | cut -d' ' -f1; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

if [[ ! -f "$WORK/recipe2_a.pt" ]]; then
  echo "== (a) dense, 2 epochs from the initial weights"
  "$lithe" train --model "$MODEL" --epochs 2 "${sgd[@]}" --output "$WORK/recipe2_a.pt" --json \
    | epochs
fi

echo "== float: 2 more epochs from (a), the baseline of (e)"
"$lithe" train --model "$WORK/recipe2_a.pt" --epochs 2 "${sgd[@]}" \
  --output "$WORK/recipe2_float.pt" --json | epochs > "$WORK/recipe2_float.txt"
cat "$WORK/recipe2_float.txt"
float_acc=$(last_accuracy < "$WORK/recipe2_float.txt")

run() {  # $1 label, $2 config name
  echo "== $1"
  "$lithe" compress --model "$WORK/recipe2_a.pt" --config "$WORK/$2.json" --epochs 2 \
    "${sgd[@]}" --output "$WORK/recipe2_$2.pt" --json > "$WORK/recipe2_$2.json"
  epochs < "$WORK/recipe2_$2.json" | tee "$WORK/recipe2_$2.txt"
  local acc
  acc=$(last_accuracy < "$WORK/recipe2_$2.txt")
  echo "final accuracy $acc (float $float_acc, difference $(awk -v a="$acc" -v b="$float_acc" \
    'BEGIN {printf "%+.4f", a - b}'))"
}
run "(e) QAT int8: weight 8 + output 8 bits on Conv2d/Linear, quant_start_step 0" qat_w8o8
run "(f) DoReFa 4-bit weights on Conv2d/Linear" dorefa_w4
run "BNN: binary weights on Conv2d/Linear" bnn_w1
run "LSQ: weight 8 + output 8 bits on Conv2d/Linear" lsq_w8o8

# Step time: epoch times vary by ~10% from run to run on this machine, so one float epoch and one
# epoch of each quantizer alternate, five times, and the medians are compared.
echo "== step time: 1-epoch runs from (a), float and each quantizer alternating, 5 rounds"
declare -A times
for _ in 1 2 3 4 5; do
  times[float]+="$("$lithe" train --model "$WORK/recipe2_a.pt" --epochs 1 "${sgd[@]}" \
    --output "$WORK/recipe2_time.pt" --json 2>/dev/null | epochs | cut -d' ' -f2) "
  for q in qat_w8o8 dorefa_w4 bnn_w1 lsq_w8o8; do
    times[$q]+="$("$lithe" compress --model "$WORK/recipe2_a.pt" --config "$WORK/$q.json" \
      --epochs 1 "${sgd[@]}" --output "$WORK/recipe2_time.pt" --json | epochs | cut -d' ' -f2) "
  done
done
# shellcheck disable=SC2086
float_median=$(median ${times[float]})
echo "float epochs: ${times[float]}s (median $float_median)"
for q in qat_w8o8 dorefa_w4 bnn_w1 lsq_w8o8; do
  # shellcheck disable=SC2086
  m=$(median ${times[$q]})
  echo "$q epochs: ${times[$q]}s (median $m): step time $(awk -v a="$m" -v b="$float_median" \
    'BEGIN {printf "%.2f", a / b}')x the float step"
done
