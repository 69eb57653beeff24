#!/usr/bin/env bash
# usage: scripts/fuzz.sh SECONDS [HARNESS...]
#
# Builds the libFuzzer harnesses (tests/fuzz/, clang, ASan + UBSan + libFuzzer) into build-fuzz/
# (or $LITHE_FUZZ_BUILD_DIR) and runs each one for SECONDS, one after another, over a scratch
# copy of its seed corpus (tests/fuzz/corpus/<harness>/): -max_total_time=SECONDS
# -print_final_stats=1 -rss_limit_mb=4096 -timeout=10, ASAN_OPTIONS=detect_leaks=0. Inputs that
# crash (or time out, or exhaust memory) are kept in build-fuzz/artifacts/<harness>/, logs in
# build-fuzz/logs/. Prints, per harness, the executions done, exec/s and crashes found, then a
# summary table; exits non-zero if any harness crashed or could not run.
#
# Environment: LITHE_FUZZ_BUILD_DIR (build-fuzz), LITHE_FUZZ_JOBS (build parallelism, 2),
# LITHE_FUZZ_NO_BUILD=1 (use the harnesses already built), LITHE_FUZZ_FLAGS (extra libFuzzer
# flags), CXX (clang++), ASAN_OPTIONS / UBSAN_OPTIONS (appended to the defaults).
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  echo "usage: $0 SECONDS [HARNESS...]   (SECONDS per harness, a positive integer)" >&2
  exit 2
fi
seconds=$1
shift
cd "$(dirname "$0")/.."
root=$PWD
build=${LITHE_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${LITHE_FUZZ_JOBS:-2}

if [[ ${LITHE_FUZZ_NO_BUILD:-0} != 1 ]]; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  configure=(-S tests/fuzz -B "$build" -DCMAKE_CXX_COMPILER="${CXX:-clang++}")
  # libtorch: the pinned wheel's in .venv/ (scripts/install-deps.sh), as scripts/build.sh uses.
  torch_cmake=$(ls -d "$root"/.venv/lib/python3*/site-packages/torch/share/cmake 2> /dev/null | head -1)
  if [[ -n $torch_cmake ]]; then
    configure+=(-DCMAKE_PREFIX_PATH="$torch_cmake")
  fi
  if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja > /dev/null; then
    configure+=(-G Ninja)
  fi
  echo "==> building the fuzz harnesses in $build (-j$jobs)"
  cmake "${configure[@]}" > /dev/null
  cmake --build "$build" -j "$jobs"
fi

if [[ $# -gt 0 ]]; then
  harnesses=("$@")
else
  [[ -f $build/harnesses.txt ]] || { echo "no $build/harnesses.txt: build first" >&2; exit 1; }
  mapfile -t harnesses < "$build/harnesses.txt"
fi

rows=()
failed=0
for name in "${harnesses[@]}"; do
  [[ -n $name ]] || continue
  set +e
  output=$(tests/fuzz/run_harness.sh "$name" "$build/fuzz_$name" "tests/fuzz/corpus/$name" \
             "$seconds" "$build" 2>&1 | tee /dev/stderr)
  rc=$?
  set -e
  line=$(grep '^LITHE_FUZZ_RESULT ' <<< "$output" | tail -1)
  if [[ -z $line ]]; then
    line="LITHE_FUZZ_RESULT $name - - - - - error"
  fi
  read -r _ h executions rate crashes new_units peak status <<< "$line"
  if [[ $rc -ne 0 || $status != ok ]]; then
    failed=1
  fi
  rows+=("$h|$executions|$rate|$crashes|$new_units|$peak|$status")
  printf '%s: %s executions, %s exec/s, %s crashes (%s)\n' \
    "$h" "$executions" "$rate" "$crashes" "$status" >&2
done

echo
echo "Fuzzing summary: ${seconds} s per harness, ASan+UBSan, $(clang++ --version 2>/dev/null | head -1)"
printf '| %-12s | %12s | %8s | %7s | %9s | %12s | %-9s |\n' \
  harness executions exec/s crashes "new units" "peak RSS MB" status
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})" \
  "$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..9})" "$(printf -- '-%.0s' {1..11})" \
  "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..11})"
total_exec=0
total_crashes=0
for row in "${rows[@]}"; do
  IFS='|' read -r h executions rate crashes new_units peak status <<< "$row"
  printf '| %-12s | %12s | %8s | %7s | %9s | %12s | %-9s |\n' \
    "$h" "$executions" "$rate" "$crashes" "$new_units" "$peak" "$status"
  [[ $executions =~ ^[0-9]+$ ]] && total_exec=$((total_exec + executions))
  [[ $crashes =~ ^[0-9]+$ ]] && total_crashes=$((total_crashes + crashes))
done
printf '| %-12s | %12s | %8s | %7s | %9s | %12s | %-9s |\n' \
  total "$total_exec" "" "$total_crashes" "" "" "$([[ $failed -eq 0 ]] && echo ok || echo FAILED)"
if [[ $failed -ne 0 ]]; then
  echo "Findings and logs: $build/artifacts/<harness>/, $build/logs/<harness>.log"
fi
exit "$failed"
