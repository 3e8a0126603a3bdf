#!/usr/bin/env bash
# One device call for the runtime library (issue 10): builds kiln and the installable runtime, then
#  1. tests/install_example_test.sh on the GPU: the example built against the installed package runs the mlp
#     fixture (graph replay, then kernel by kernel with KILN_SYNC_EACH_KERNEL=1: same bytes) and reproduces
#     `kiln run DIR`'s output bytes from the inputs kiln saved;
#  2. the TinyLlama-shaped transformers Llama, bf16 1 x 128 (KILN_RUNTIME_CONFIG=dtype:batch:seq to change it):
#     `kiln run M.pt` (fingerprints, inputs saved), `kiln run out/` of its emitted directory, the example fed the same
#     inputs (three fingerprints that must agree), `kiln run out/ --check --reference M.pt`, and `kiln run out/
#     --bench N -v` (graph replay, launched, and the runtime's forward() per forward).
# Prints a short summary last; logs in $OUT/runtime.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-runtime}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
LOG=$OUT/runtime.log
W=$(mktemp -d)
IFS=: read -r dt b s <<< "${KILN_RUNTIME_CONFIG:-bf16:1:128}"
{
  bash scripts/device_build.sh "$OUT/build.log" && cmake --build build --target kiln_runtime_shared kiln_runtime_static \
    >> "$OUT/build.log" 2>&1 || { echo "build failed"; exit 1; }
  echo "== install test"; bash tests/install_example_test.sh build; echo "install test rc $?"
  # the example, built once more for step 2 (the test removes its own)
  cmake --install build --prefix "$W/prefix" > /dev/null && \
    cmake -S examples/run_emitted -B "$W/ex" -G Ninja -DCMAKE_PREFIX_PATH="$W/prefix" > /dev/null && cmake --build "$W/ex" > /dev/null
  echo "== TinyLlama $dt ${b}x$s"
  python3 models/hf_llama.py --preset tinyllama --device cuda --dtype "$dt" --batch "$b" --seq "$s" --no-check -o "$W/m.pt"
  export KILN_CACHE_DIR=$W/cache
  ./build/kiln compile "$W/m.pt" --emit cuda -o "$W/out"
  ./build/kiln run "$W/m.pt" --save-io "$W/io" | tee "$W/a.txt"
  ./build/kiln run "$W/out" --save-io "$W/io2" | tee "$W/b.txt"
  "$W/ex/run_emitted" "$W/out" "$W/io" | tee "$W/c.txt"
  cmp "$W/io/output0.bin" "$W/io2/output0.bin" && echo "output bytes: kiln run M.pt == kiln run out/"
  for f in a b c; do echo "$f $(grep -o 'fnv1a [0-9a-f]*' "$W/$f.txt" | head -n 1)"; done
  ./build/kiln run "$W/out" --check --reference "$W/m.pt"
  ./build/kiln run "$W/out" --bench 200 -v
} > "$LOG" 2>&1
grep -E "^== |install test|install_example_test|fnv1a|output bytes|PASS|FAIL|ms per forward|error" "$LOG" | tail -n 40
