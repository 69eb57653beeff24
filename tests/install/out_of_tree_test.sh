#!/usr/bin/env bash
# usage: out_of_tree_test.sh <lithe build dir> <sample source dir> [cmake] [model.pt] [app dir]
#
# 1. cmake --install <build> --prefix <tmp>/prefix
# 2. configures and builds <sample> against that prefix (CMAKE_PREFIX_PATH only, Ninja, ccache
#    when present), as a third party would
# 3. runs <tmp>/prefix/bin/lithe plugins --plugin-dir <sample build dir> and requires the sample
#    plugin loaded from the sample build dir, the level plugin loaded from
#    <tmp>/prefix/lib/lithe/plugins (found with no flag), and no failed plugin.
# 4. when a model is given, compresses it with the sample's pruner through the installed CLI and
#    checks the balanced (per-row) pruning counts on conv1 of LeNet.
# 5. when an app source dir is given (samples/embedding_app), builds its programs against the
#    prefix too and runs them from the scratch directory, outside the prefix, with no
#    LITHE_PLUGIN_PATH: they must find the installed plugins by themselves; prune_lenet prunes
#    the model to exactly 0.8 per layer, prune_then_quantize does so with its own training loop
#    (AGP) and keeps it through QAT, and its two --misuse runs must fail naming the call to use;
#    compress_and_convert prunes, quantizes and converts in memory with the jobs, and its three
#    models must be byte for byte the ones the installed CLI writes for the same steps.
#    tests/install/api_1_3 (Lithe 1.3's README example, its calls unchanged) is built the same
#    way and run: the 1.x API keeps compiling for code written against 1.3.
# Every consumer is configured with Torch_DIR=$LITHE_TORCH_DIR and nothing else of the build: the
# installed package must not need what Lithe only needed to build itself (no CUDA:: target).
# The install must also carry the documentation (share/doc/lithe).
# The scratch directory is removed on success and kept (path printed) on failure.
# $LITHE_SAMPLE_CXX_FLAGS, when set, is added to the sample's compile and link flags.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 <lithe build dir> <sample source dir> [cmake] [model.pt]" >&2
  exit 2
fi
build_dir=$1
sample_dir=$2
cmake=${3:-cmake}
model=${4:-}
app_dir=${5:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/lithe_install_test.XXXXXX")
work=$(cd "$work" && pwd -P)  # the loader reports canonical paths
prefix=$work/prefix
sample_build=$work/sample_build

fail() {
  echo "FAIL: $*" >&2
  echo "(scratch directory kept: $work)" >&2
  exit 1
}
on_exit() {
  local status=$?
  if [[ $status -eq 0 ]]; then
    rm -rf "$work"
  else
    echo "out_of_tree_test.sh failed with status $status; scratch directory kept: $work" >&2
  fi
}
trap on_exit EXIT

step() { echo; echo "==> $*"; }

step "installing $build_dir into $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" > "$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; fail "cmake --install failed"; }
for file in bin/lithe lib/lithe/plugins/lithe_plugin_level.so lib/cmake/Lithe/LitheConfig.cmake \
            lib/cmake/Lithe/LithePluginHelpers.cmake include/lithe/sdk.h \
            include/lithe/kernels/masking.h; do
  [[ -e $prefix/$file ]] || fail "the install tree lacks $file"
done

for file in share/doc/lithe/README.md share/doc/lithe/sdk-guide.md \
            share/doc/lithe/plugins/agp.md share/doc/lithe/plugins/level.md \
            share/doc/lithe/samples/configs/agp.json \
            share/doc/lithe/samples/out_of_tree_plugin/CMakeLists.txt \
            share/doc/lithe/samples/embedding_app/prune_then_quantize.cpp; do
  [[ -s $prefix/$file ]] || fail "the install tree lacks the documentation file $file"
done
if grep -l "CUDA::" "$prefix"/lib/cmake/Lithe/*.cmake; then
  fail "the installed CMake package refers to CUDA targets (see the files above)"
fi

# A consumer finds Lithe through CMAKE_PREFIX_PATH and libtorch through Torch_DIR (the same
# libtorch this build used: LITHE_TORCH_DIR). PyPI's torch wheel is a CUDA build whose own CMake
# package requires a CUDA toolkit at configure time, so the toolkit stays visible; Lithe's
# package itself must not ask for one (checked above).
[[ -n ${LITHE_TORCH_DIR:-} ]] || fail "LITHE_TORCH_DIR (the libtorch CMake folder) is not set"
consumer=(env -u Lithe_DIR -u Lithe_ROOT -u LITHE_PLUGIN_PATH)
consumer_args=("-DTorch_DIR=$LITHE_TORCH_DIR")

step "configuring $sample_dir against $prefix"
configure_args=(-S "$sample_dir" -B "$sample_build" -G Ninja -DCMAKE_BUILD_TYPE=Release
                "-DCMAKE_PREFIX_PATH=$prefix" "${consumer_args[@]}")
if command -v ccache > /dev/null; then
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Extra flags the installed build requires of plugins (the sanitizers of a LITHE_SANITIZE build).
if [[ -n ${LITHE_SAMPLE_CXX_FLAGS:-} ]]; then
  configure_args+=("-DCMAKE_CXX_FLAGS=$LITHE_SAMPLE_CXX_FLAGS"
                   "-DCMAKE_MODULE_LINKER_FLAGS=$LITHE_SAMPLE_CXX_FLAGS")
fi
# Nothing of the Lithe build tree may leak in: no package registry, no environment hints.
"${consumer[@]}" "$cmake" "${configure_args[@]}" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  || fail "configuring the sample against the installed Lithe failed"
grep -q "^Lithe_DIR:PATH=$prefix/" "$sample_build/CMakeCache.txt" \
  || fail "find_package(Lithe) did not use the installed package:" \
          "$(grep '^Lithe_DIR' "$sample_build/CMakeCache.txt")"

step "building the sample"
"$cmake" --build "$sample_build" -j 2 \
  || fail "building the sample against the installed Lithe failed"
plugin=$sample_build/lithe_plugin_acme_magnitude.so
[[ -f $plugin ]] || fail "the sample build did not produce $plugin"

step "$prefix/bin/lithe plugins --plugin-dir $sample_build"
output=$(env -u LITHE_PLUGIN_PATH "$prefix/bin/lithe" plugins --plugin-dir "$sample_build" 2>&1) \
  || { echo "$output" >&2; fail "lithe plugins exited with an error"; }
echo "$output"

grep -qF "  $prefix/lib/lithe/plugins" <<< "$output" \
  || fail "the search path lacks the installed plugin directory $prefix/lib/lithe/plugins"
grep -qE "^  loaded  acme_magnitude [^ ]+  $plugin\$" <<< "$output" \
  || fail "the out-of-tree plugin acme_magnitude was not loaded from $plugin"
grep -qE "^          pruner acme_magnitude\$" <<< "$output" \
  || fail "the out-of-tree plugin did not register pruner acme_magnitude"
grep -qE "^  loaded  level [^ ]+  $prefix/lib/lithe/plugins/lithe_plugin_level.so\$" <<< "$output" \
  || fail "the installed level plugin was not loaded from $prefix/lib/lithe/plugins"
if grep -q "^  FAILED" <<< "$output"; then
  fail "some plugins failed to load (see above)"
fi

if [[ -n $model ]]; then
  [[ -f $model ]] || fail "model $model not found"
  step "$prefix/bin/lithe compress with pruner acme_magnitude on $model"
  output=$(env -u LITHE_PLUGIN_PATH "$prefix/bin/lithe" compress --plugin-dir "$sample_build" \
             --model "$model" --config "$sample_dir/acme_magnitude.json" \
             --output "$work/compressed.pt" 2>&1) \
    || { echo "$output" >&2; fail "lithe compress with the out-of-tree pruner failed"; }
  echo "$output"
  [[ -s $work/compressed.pt ]] || fail "lithe compress did not write $work/compressed.pt"
  # LeNet's conv1 weight is [6, 1, 5, 5]: balanced pruning at 0.75 removes int(25 * 0.75) = 18
  # weights from each of the 6 rows, 108 in all (level pruning would remove int(150 * 0.75) = 112).
  grep -qE "^conv1 +Conv2d +150 +108 " <<< "$output" \
    || fail "conv1 should have 108 of 150 weights pruned (6 rows x 18) by acme_magnitude"
fi

# build_program SRC BUILD WHAT: configures and builds programs (not plugins) against the
# prefix, as a consumer would.
build_program() {
  local args=(-S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix"
              -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "${consumer_args[@]}")
  if command -v ccache > /dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  if [[ -n ${LITHE_SAMPLE_CXX_FLAGS:-} ]]; then
    args+=("-DCMAKE_CXX_FLAGS=$LITHE_SAMPLE_CXX_FLAGS"
           "-DCMAKE_EXE_LINKER_FLAGS=$LITHE_SAMPLE_CXX_FLAGS")
  fi
  "${consumer[@]}" "$cmake" "${args[@]}" \
    || fail "configuring $3 against the installed Lithe failed"
  "$cmake" --build "$2" -j 2 || fail "building $3 against the installed Lithe failed"
}

if [[ -n $app_dir && -n $model ]]; then
  step "building $app_dir against $prefix"
  build_program "$app_dir" "$work/app_build" "the embedding app"
  step "running the embedding app from $work (outside the prefix, no LITHE_PLUGIN_PATH)"
  output=$(cd "$work" && env -u LITHE_PLUGIN_PATH "$work/app_build/prune_lenet" "$model" \
             "$work/app_pruned.pt" 0.8 2>&1) \
    || { echo "$output" >&2; fail "the embedding app failed (were the plugins found?)"; }
  echo "$output"
  grep -qF "loaded $prefix/lib/lithe/plugins/lithe_plugin_level.so" <<< "$output" \
    || fail "the embedding app did not load the installed level plugin from $prefix/lib/lithe/plugins"
  grep -qE "^sparsity 0\.8 " <<< "$output" || fail "the embedding app did not reach sparsity 0.8"
  [[ -s $work/app_pruned.pt ]] || fail "the embedding app did not write $work/app_pruned.pt"

  step "running prune_then_quantize (own training loop: AGP to 0.8, then QAT)"
  output=$(cd "$work" && "${consumer[@]}" "$work/app_build/prune_then_quantize" "$model" \
             "$work/app_qat.pt" 2>&1) \
    || { echo "$output" >&2; fail "prune_then_quantize failed"; }
  echo "$output"
  grep -qE "^pruned: sparsity 0\.8 " <<< "$output" \
    || fail "the own-loop AGP run did not reach sparsity 0.8"
  grep -qE "^quantized: sparsity 0\.8 " <<< "$output" \
    || fail "the pruning masks were not kept through QAT"
  [[ -s $work/app_qat.pt ]] || fail "prune_then_quantize did not write $work/app_qat.pt"

  # The jobs in memory give the bytes the CLI writes for the same steps.
  data=${LITHE_TEST_DATA:-/usr/share/datasets/fashion-mnist}
  step "running compress_and_convert (prune, quantize, convert in memory) against the CLI"
  mkdir -p "$work/jobs_app" "$work/jobs_cli"
  output=$(cd "$work" && "${consumer[@]}" "$work/app_build/compress_and_convert" "$model" \
             "$data" "$work/jobs_app" 2>&1) \
    || { echo "$output" >&2; fail "compress_and_convert failed"; }
  echo "$output"
  grep -qE "^pruned 5 layers; quantized 5 layers; int8 layers 5, float layers 0$" <<< "$output" \
    || fail "compress_and_convert did not prune, quantize and convert every LeNet layer"
  printf '%s' '{"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]}' \
    > "$work/jobs_cli/level.json"
  printf '%s' '{"algorithm": "qat", "config_list": [{"quant_types": ["input", "weight", "output"],
            "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]}' > "$work/jobs_cli/qat.json"
  cli=(env -u LITHE_PLUGIN_PATH "$prefix/bin/lithe")
  "${cli[@]}" compress --model "$model" --config "$work/jobs_cli/level.json" \
    --output "$work/jobs_cli/pruned.pt" > "$work/jobs_cli/log" 2>&1 \
    || { cat "$work/jobs_cli/log" >&2; fail "lithe compress (level) failed"; }
  "${cli[@]}" compress --model "$work/jobs_cli/pruned.pt" --config "$work/jobs_cli/qat.json" \
    --output "$work/jobs_cli/quantized.pt" --data "$data" --calibration-batches 2 \
    > "$work/jobs_cli/log" 2>&1 \
    || { cat "$work/jobs_cli/log" >&2; fail "lithe compress (qat) failed"; }
  "${cli[@]}" convert --model "$work/jobs_cli/quantized.pt" --input-shape 4,1,28,28 \
    --output "$work/jobs_cli/int8.pt" --samples 8 --latency-runs 3 > "$work/jobs_cli/log" 2>&1 \
    || { cat "$work/jobs_cli/log" >&2; fail "lithe convert failed"; }
  for file in pruned.pt quantized.pt int8.pt; do
    cmp "$work/jobs_app/$file" "$work/jobs_cli/$file" \
      || fail "$file from the jobs in memory differs from the CLI's"
  done
  echo "pruned.pt, quantized.pt and int8.pt: the same bytes from memory as from the CLI"

  step "building and running a program written for Lithe 1.3 (its calls, the area headers)"
  build_program "$(dirname "${BASH_SOURCE[0]}")/api_1_3" "$work/api13_build" \
    "a program written for Lithe 1.3"
  mkdir -p "$work/api13_out"
  output=$(cd "$work" && env -u LITHE_PLUGIN_PATH "$work/api13_build/embed_1_3" "$model" \
             "$prefix/share/doc/lithe/samples/configs/level.json" "$work/api13_out" 2>&1) \
    || { echo "$output" >&2; fail "the 1.3 program failed"; }
  echo "$output"
  grep -qE "^1\.3 program: pruned [1-9][0-9]* layers$" <<< "$output" \
    || fail "the 1.3 program did not prune"
  [[ -s $work/api13_out/pruned.pt && -s $work/api13_out/mask.pth ]] \
    || fail "the 1.3 program did not write pruned.pt and mask.pth"

  for misuse in optimizer-step no-update-epoch; do
    step "running prune_then_quantize --misuse $misuse (must be reported)"
    status=0
    output=$(cd "$work" && "${consumer[@]}" "$work/app_build/prune_then_quantize" "$model" \
               "$work/app_misuse.pt" --misuse "$misuse" 2>&1) || status=$?
    echo "$output"
    [[ $status -eq 1 ]] || fail "--misuse $misuse exited with $status, not 1"
    case $misuse in
      optimizer-step) expected="session.optimizer_step(optimizer)" ;;
      no-update-epoch) expected="session.update_epoch(epoch)" ;;
    esac
    grep -qF "$expected" <<< "$output" || fail "--misuse $misuse was not reported naming $expected"
    [[ ! -e $work/app_misuse.pt ]] || fail "--misuse $misuse wrote a model"
  done
fi

echo
echo "PASS: a plugin built against the installed Lithe loads next to the installed plugins"
