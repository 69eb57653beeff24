#!/usr/bin/env bash
# Speedup benchmark of BENCHMARKS.md: VGG-16-BN and ResNet-18 (CIFAR, 3x32x32, from
# scripts/make_speedup_models.py) pruned with L1 filter 0.5 on every Conv2d (dependency-aware for
# ResNet, so the convolutions feeding one residual add prune the same channels), then made
# physically smaller with `lithe speedup`. Each `lithe speedup` run measures, in one process,
# the masked model against the smaller one: parameters, FLOPs (NNI's default counter, per
# sample), serialized bytes and the median latency of alternating forwards. Prints one Markdown
# table (the one BENCHMARKS.md quotes). Reduction = 1 - after/before; the last-but-two column is
# latency reduction / FLOPs reduction (issue 5's target: >= 0.8).
#
# Usage: scripts/bench-speedup.sh
# Environment: LITHE_BUILD_DIR (default build-bench; configured Release without tests if new),
#   LITHE_BENCH_DIR (default build/bench; models and reports go to its speedup/ subdirectory),
#   LITHE_SPEEDUP_BATCHES (default "1 16"), LITHE_SPEEDUP_THREADS (default "2 1"),
#   LITHE_SPEEDUP_RUNS (timed forwards of each model, default 200), LITHE_SPEEDUP_WARMUP (20).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${LITHE_BUILD_DIR:-build-bench}"
WORK="${LITHE_BENCH_DIR:-build/bench}/speedup"
BATCHES="${LITHE_SPEEDUP_BATCHES:-1 16}"
THREADS="${LITHE_SPEEDUP_THREADS:-2 1}"
RUNS="${LITHE_SPEEDUP_RUNS:-200}"
WARMUP="${LITHE_SPEEDUP_WARMUP:-20}"

# Build only the CLI and the plugin it needs; an existing build dir keeps its own settings.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLITHE_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" -j 2 --target lithe filter_norm >/dev/null
lithe="$BUILD_DIR/bin/lithe"

mkdir -p "$WORK"
/usr/bin/python3 scripts/make_speedup_models.py "$WORK"

cat > "$WORK/l1filter.json" <<'JSON'
{"algorithm": "l1_filter", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]}
JSON
cat > "$WORK/l1filter_dep.json" <<'JSON'
{"algorithm": "l1_filter", "options": {"dependency_aware": true},
 "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]}
JSON

reports=()
for model in vgg16_bn resnet18; do
  config="$WORK/l1filter.json"
  [[ "$model" == resnet18 ]] && config="$WORK/l1filter_dep.json"
  "$lithe" compress --model "$WORK/$model.pt" --config "$config" \
    --output "$WORK/${model}_masked.pt" --masks "$WORK/${model}_masks.pth" >/dev/null
  for batch in $BATCHES; do
    for threads in $THREADS; do
      report="$WORK/${model}_b${batch}_t${threads}.json"
      echo "== $model, batch $batch, $threads thread(s): $(uptime | sed 's/.*load/load/')" >&2
      "$lithe" speedup --model "$WORK/${model}_masked.pt" --masks "$WORK/${model}_masks.pth" \
        --input-shape "$batch,3,32,32" --output "$WORK/${model}_small.pt" --json "$report" \
        --latency-runs "$RUNS" --warmup "$WARMUP" --threads "$threads" >/dev/null
      reports+=("$report")
    done
  done
done

python3 - "$WARMUP" "${reports[@]}" <<'PY'
import json, os, sys

def red(r):
    return 1.0 - r

def mb(n):
    return "%.1f MB" % (n / 1e6)

def mega(n):
    return "%.2f M" % (n / 1e6)

print("| model | batch | threads | params before → after (reduction) "
      "| FLOPs/sample before → after (reduction, speedup) "
      "| latency ms before → after (reduction, speedup) "
      "| latency red. ÷ FLOPs red. | file before → after | max abs diff (BN shift explains it) |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[2:]:
    d = json.load(open(path))
    name = os.path.basename(d["model"]).replace("_masked.pt", "")
    p, f, b, l = d["params"], d["flops"], d["file_bytes"], d["latency_ms"]
    explained = d["max_abs_diff"] <= 1e-4 or d["max_abs_diff_without_bn_shift"] <= 1e-4
    print("| %s | %d | %d | %s → %s (%.1f%%) | %s → %s (%.1f%%, %.2f×) "
          "| %.2f → %.2f (%.1f%%, %.2f×) "
          "| **%.2f** | %s → %s (%.1f%%) | %.3g (%s; %.1g without it) |" % (
              name, d["input_shape"][0], l["threads"],
              mega(p["before"]), mega(p["after"]), 100 * red(p["ratio"]),
              mega(f["before"]), mega(f["after"]), 100 * red(f["ratio"]), 1 / f["ratio"],
              l["before"], l["after"], 100 * red(l["ratio"]), 1 / l["ratio"],
              red(l["ratio"]) / red(f["ratio"]),
              mb(b["before"]), mb(b["after"]), 100 * red(b["ratio"]),
              d["max_abs_diff"], "yes" if explained else "NO",
              d["max_abs_diff_without_bn_shift"]))
print()
print("latency: median of %d alternating forwards of each model after %s warm-up, "
      "in one process per row; reduction = 1 - after/before" % (d["latency_ms"]["runs"], sys.argv[1]))
PY
