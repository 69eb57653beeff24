#!/usr/bin/env bash
# Adds the benchmark peers (scripts/bench-peers-requirements.txt: torchao, Torch-Pruning, onnx for
# ONNX Runtime's quantizer) to the project's .venv/ made by scripts/install-deps.sh. Benchmarks
# only: no test needs them, and install-deps.sh leaves them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
start=$(date +%s)
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
  --requirement scripts/bench-peers-requirements.txt
.venv/bin/python -c "import torchao, torch_pruning, onnx, onnxruntime.quantization" || {
  echo "install-bench-peers: the peers were installed but cannot be imported (see above)" >&2
  exit 1
}
echo "install-bench-peers: installed in $(( $(date +%s) - start )) s"
