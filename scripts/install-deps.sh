#!/usr/bin/env bash
# Installs everything Lithe needs to build, test and benchmark: Debian's packages (compilers,
# libraries, data, and python3-torch 1.13 for NNI v2.0 only), then the project's Python
# environment in .venv/ from PyPI (scripts/python-requirements.txt: the torch wheel whose libtorch
# Lithe builds against, torchvision, onnxruntime). Rerunning it installs only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# libopenblas0-pthread makes OpenBLAS the system BLAS (about 40x faster GEMM than Debian's
# reference BLAS); python3-torch (1.13) runs NNI v2.0 for the benchmarks and the conformance
# generators, nothing else. clang and libclang-rt-14-dev (libFuzzer, ASan/UBSan runtimes) build
# the fuzz harnesses (tests/fuzz, scripts/fuzz.sh). libonnx-dev is built with protobuf 3.21.12,
# the version whose headers the torch wheel carries (CMakeLists.txt checks that they agree).
packages=(build-essential cmake ninja-build ccache git clang libclang-rt-14-dev
  libboost-dev libboost-program-options-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libopenblas0-pthread zlib1g-dev
  python3-venv python3-torch dataset-fashion-mnist libonnx-dev libprotobuf-dev libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi

# The Python environment: Debian's CPython 3.11, every package pinned and installed without
# dependency resolution (the requirements file is the whole environment). A stamp holding the
# requirements' hash makes a rerun with nothing changed cost one file read.
venv=.venv
requirements=scripts/python-requirements.txt
stamp="$venv/.lithe-requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  --requirement "$requirements"
"$venv/bin/python" -c "import torch, torchvision, onnxruntime" || {
  echo "install-deps: $venv was installed from $requirements but cannot import torch," \
       "torchvision and onnxruntime (see the error above)" >&2
  exit 1
}
echo "$want" > "$stamp"
echo "install-deps: $venv ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))" \
     "installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
