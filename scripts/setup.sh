#!/usr/bin/env bash
# Installs what kiln needs to build and test, skipping what is already there. Idempotent.
#   Debian: cmake, ninja, ccache, CLI11, fmt, nlohmann-json, GoogleTest, clang (libFuzzer, for tests/fuzz_manifest.sh and tests/fuzz_pt.sh)
#   PyPI:   torch==2.11.0 (LibTorch for the frontend and reference numerics), numpy, transformers==5.17.0
#           (models/hf_llama.py; the committed fixtures do not need it, regenerating them does), lit and filecheck
#           (tests/passes: the per-pass IR tests), expecttest (torch's OpInfo samples import it: tests/conformance),
#           wheel (tests/python/package_test.sh builds the Python package, python/, without fetching a build backend)
# The CUDA 13.0 toolkit is expected at /usr/local/cuda (preinstalled on kiln's machines).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

need_apt=()
for pkg in cmake ninja-build ccache libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev clang; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.11.0") else 1)' 2>/dev/null; then
  echo "setup: installing torch==2.11.0 from PyPI"
  "$PY" -m pip install -q torch==2.11.0
fi
"$PY" -c 'import numpy' 2>/dev/null || "$PY" -m pip install -q numpy
"$PY" -c 'import transformers, sys; sys.exit(0 if transformers.__version__ == "5.17.0" else 1)' 2>/dev/null ||
  "$PY" -m pip install -q transformers==5.17.0
"$PY" -c 'import lit' 2>/dev/null || "$PY" -m pip install -q lit==23.1.5
"$PY" -c 'import filecheck' 2>/dev/null || "$PY" -m pip install -q filecheck==1.0.6
"$PY" -c 'import expecttest' 2>/dev/null || "$PY" -m pip install -q expecttest==0.3.0
"$PY" -c 'import wheel' 2>/dev/null || "$PY" -m pip install -q wheel==0.45.1

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: error: nvcc (CUDA 13.0 toolkit) not found at /usr/local/cuda/bin; install the CUDA toolkit" >&2
  exit 1
fi
