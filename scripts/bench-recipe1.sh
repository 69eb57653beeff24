#!/usr/bin/env bash
# Recipe 1 of shared/reference/recipes.md: Level pruning of Big25M to sparsity 0.8, run the way
# BENCHMARKS.md reports it. Needs a build (scripts/build.sh) and /usr/bin/python3 with torch to
# create the model. Usage: scripts/bench-recipe1.sh [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-5}"
WORK="${LITHE_BENCH_DIR:-build/bench}"
mkdir -p "$WORK"
[ -f "$WORK/big25m.pt" ] || /usr/bin/python3 scripts/make_big25m.py "$WORK/big25m.pt"
cat > "$WORK/level80.json" <<'JSON'
{"algorithm": "level", "config_list": [{"sparsity": 0.8, "op_types": ["default"]}]}
JSON

echo "== selection kernel vs torch on Big25M's weights (1 thread)"
build/bin/lithe_bench_select --model "$WORK/big25m.pt" --repeats 5 --threads 1

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run_whole() {  # $@: extra lithe compress arguments; prints "wall compress" per run
  for _ in $(seq "$RUNS"); do
    local start end line
    start=$(date +%s.%N)
    line=$(build/bin/lithe compress --model "$WORK/big25m.pt" --config "$WORK/level80.json" \
             --output "$WORK/big25m_pruned.pt" "$@" | grep '^time:')
    end=$(date +%s.%N)
    echo "$(awk -v a="$end" -v b="$start" 'BEGIN {printf "%.3f", a - b}') $(echo "$line" | sed -E 's/.*compress ([0-9.]+) s.*/\1/')"
  done
}
echo
echo "== lithe compress, whole process (start, load plugins and model, prune, write, exit)"
OUT=$(run_whole)
echo "model only:    whole-process median $(echo "$OUT" | cut -d' ' -f1 | median) s, in-process pruning median $(echo "$OUT" | cut -d' ' -f2 | median) s"
OUT=$(run_whole --masks "$WORK/big25m_masks.pt")
echo "model + masks: whole-process median $(echo "$OUT" | cut -d' ' -f1 | median) s, in-process pruning median $(echo "$OUT" | cut -d' ' -f2 | median) s"
cat > "$WORK/empty.cpp" <<'CPP'
int main() { return 0; }
CPP
g++ "$WORK/empty.cpp" -o "$WORK/empty_torch" -Wl,--no-as-needed -ltorch_cpu -lc10
FLOOR=$(for _ in $(seq "$RUNS"); do s=$(date +%s.%N); "$WORK/empty_torch"; e=$(date +%s.%N); awk -v a="$e" -v b="$s" 'BEGIN {printf "%.3f\n", a - b}'; done | median)
echo "floor:         an empty program linked to Debian's libtorch takes $FLOOR s to start and exit"
