#!/usr/bin/env bash
# Configures and builds kiln into build/ (Release, Ninja, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
TORCH_PREFIX=$(${PYTHON:-python3} -c 'import torch;print(torch.utils.cmake_prefix_path)')
# Relative paths in ccache keys: worktrees beside this checkout (scripts/compare_emitted.sh) share its objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
LAUNCHER=(); command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=${KILN_BUILD_TYPE:-Release} \
  -DKILN_TORCH_PREFIX="$TORCH_PREFIX" "${LAUNCHER[@]}" ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "${KILN_JOBS:-$(nproc)}" ${KILN_TARGET:+--target "$KILN_TARGET"}
