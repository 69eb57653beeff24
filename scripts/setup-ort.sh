#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (npm onnxruntime-node, pinned; its CPU binaries ship in the
# package, so ONNXRUNTIME_NODE_INSTALL=skip avoids the optional GPU download) into DIR (default
# build/ort) for the ONNX Runtime parity tests. Without node/npm, or when the install fails, it
# says so and exits 0: those tests then skip with that reason, they never pass silently.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build/ort}"
version=1.30.0
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "setup-ort: node/npm not found: the ONNX Runtime parity tests will skip"
  exit 0
fi
if [ -f "$dir/node_modules/onnxruntime-node/package.json" ] &&
   grep -q "\"version\": \"$version\"" "$dir/node_modules/onnxruntime-node/package.json"; then
  exit 0
fi
mkdir -p "$dir"
if ONNXRUNTIME_NODE_INSTALL=skip npm install --prefix "$dir" --no-audit --no-fund \
     --loglevel=error "onnxruntime-node@$version" > "$dir/install.log" 2>&1; then
  echo "setup-ort: onnxruntime-node $version in $dir"
else
  echo "setup-ort: npm install failed (see $dir/install.log): the ONNX Runtime parity tests will skip"
fi
exit 0
