#!/usr/bin/env bash
# usage: run_harness.sh NAME BINARY CORPUS_DIR SECONDS OUT_DIR
#
# Runs one libFuzzer harness for SECONDS over a scratch copy of CORPUS_DIR plus, when present,
# the inputs of fixed findings in CORPUS_DIR/../../regressions/NAME/ (the files in the repository
# are never modified), with ASan leak checks off, -rss_limit_mb=4096, -timeout=10 and the
# harness's dictionary (dict/), keeping crash/timeout/OOM inputs in OUT_DIR/artifacts/NAME/ and
# the whole log in OUT_DIR/logs/NAME.log. Prints libFuzzer's final statistics and, last, one
# line for scripts/fuzz.sh:
#   LITHE_FUZZ_RESULT <name> <executions> <exec/s> <crashes> <new units> <peak RSS MB> <status>
# Exits 0 only when the run ended normally with no finding. Used by scripts/fuzz.sh and by the
# fuzz_smoke_<name> CTest tests. Extra libFuzzer flags: $LITHE_FUZZ_FLAGS (e.g. -seed=1).
set -uo pipefail

if [[ $# -ne 5 ]]; then
  echo "usage: $0 NAME BINARY CORPUS_DIR SECONDS OUT_DIR" >&2
  exit 2
fi
name=$1
binary=$2
corpus=$3
seconds=$4
out=$5
here=$(cd "$(dirname "$0")" && pwd)

result() {  # executions exec/s crashes new peak status
  echo "LITHE_FUZZ_RESULT $name $*"
}
if [[ ! -x $binary ]]; then
  echo "FAIL: harness $name is not built ($binary missing)" >&2
  result "-" "-" "-" "-" "-" not-built
  exit 1
fi
if [[ ! -d $corpus ]]; then
  echo "FAIL: no seed corpus at $corpus" >&2
  result "-" "-" "-" "-" "-" no-corpus
  exit 1
fi

artifacts=$out/artifacts/$name
log=$out/logs/$name.log
mkdir -p "$artifacts" "$out/logs"
artifacts=$(cd "$artifacts" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lithe_fuzz_$name.XXXXXX")
# The harnesses that read paths write every input to a file: on tmpfs when there is one, so
# that the file system does not set the pace.
if [[ -d /dev/shm && -w /dev/shm ]]; then
  scratch=$(mktemp -d /dev/shm/lithe_fuzz_$name.XXXXXX)
else
  scratch=$work/tmp
fi
trap 'rm -rf "$work" "$scratch"' EXIT
mkdir -p "$work/corpus" "$scratch"
cp -R "$corpus/." "$work/corpus/"
# Inputs of fixed findings are replayed with the seeds (regressions/<name>/, next to corpus/).
regressions=$(dirname "$corpus")/../regressions/$name
if [[ -d $regressions ]]; then
  cp -R "$regressions/." "$work/corpus/"
fi

case $name in
  config) dict=$here/dict/config.dict ;;
  idx) dict=$here/dict/idx.dict ;;
  masks | tensor_file | archive) dict=$here/dict/torch_zip.dict ;;
  *) dict="" ;;
esac
flags=(-max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=4096 -timeout=10
       -artifact_prefix="$artifacts/")
if [[ -n $dict && -f $dict ]]; then
  flags+=(-dict="$dict")
fi
# shellcheck disable=SC2206  # word splitting of the extra flags is intended
flags+=(${LITHE_FUZZ_FLAGS:-})

echo "==> $name: $binary, ${seconds} s, seeds from $corpus"
started=$(date +%s)
# The harness's scratch files go under $scratch (TMPDIR), removed with the rest.
TMPDIR=$scratch OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  "$binary" "${flags[@]}" "$work/corpus" > "$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - started ))

stat() { sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$log" | tail -1; }
executions=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
new_units=$(stat new_units_added)
peak=$(stat peak_rss_mb)
# libFuzzer's rate is executions per whole second since start: 0 when a crash comes within 1 s.
if [[ $executions =~ ^[0-9]+$ && ${rate:-0} == 0 && $executions -gt 0 ]]; then
  rate=$(( executions / (elapsed > 0 ? elapsed : 1) ))
fi
# One line per input libFuzzer saved as a finding (crash-, timeout-, oom-, leak-); slow-unit-
# files are not findings.
mapfile -t saved < <(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" |
                     grep -E '/(crash|timeout|oom|leak)-[^/]*$')
crashes=${#saved[@]}

grep -E '^(stat::|Done [0-9]+ runs)' "$log"
status=ok
if (( crashes > 0 )); then
  status=crash
elif (( rc != 0 )); then
  status=error
elif [[ -z $executions ]]; then
  status=no-stats
fi
if [[ $status != ok ]]; then
  echo "---- $name: $status (exit $rc after ${elapsed} s); end of $log:"
  grep -v -E '^(#[0-9]+|\s+NEW_FUNC|"|.*# Uses: )' "$log" | tail -60
  for file in "${saved[@]}"; do
    echo "finding: $file  (reproduce: $binary $file)"
  done
fi
result "${executions:--}" "${rate:--}" "$crashes" "${new_units:--}" "${peak:--}" "$status"
[[ $status == ok ]]
