#!/usr/bin/env bash
# Fuzzes the runtime's manifest reader (fuzz/manifest_fuzzer.cpp) with libFuzzer for FUZZ_SECONDS (default 45), from
# a seed corpus of the manifests kiln writes for the fixtures. Fails on any crash, sanitizer report, timeout or
# out-of-memory; the input that caused it is kept in $BUILD/fuzz/ (crash-*). The CTest Fuzz.ManifestReader runs this;
# a longer run: FUZZ_SECONDS=3600 bash tests/fuzz_manifest.sh build.
# Needs clang++ (Debian's clang, installed by scripts/setup.sh) with libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
SECONDS_TO_RUN=${FUZZ_SECONDS:-45}
work="$BUILD/fuzz"
mkdir -p "$work/corpus"
CXX=${FUZZ_CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz_manifest: $CXX not found (bash scripts/setup.sh installs clang)" >&2; exit 1; }
srcs=(fuzz/manifest_fuzzer.cpp src/runtime/manifest.cpp src/runtime/manifest_states.cpp src/support/error.cpp src/support/dtype.cpp src/support/target.cpp src/support/hash.cpp src/support/files.cpp)
bin="$work/manifest_fuzzer"
if [ ! -x "$bin" ] || [ -n "$(find "${srcs[@]}" include -newer "$bin" -print -quit)" ]; then
  "$CXX" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude \
    "${srcs[@]}" -lfmt -o "$bin"
fi
# Seeds: the manifests kiln writes for a few fixtures (no nvcc needed: --no-nvcc).
for m in mlp attention hf_llama_tiny_bf16 layers mlp_bf16_wide hf_llama_decode_tiny; do  # mlp_bf16_wide: tensor_maps; the decode step: states
  rm -rf "$work/emit-$m"
  "$BUILD/kiln" compile "models/fixtures/$m.pt" --emit cuda --no-nvcc -o "$work/emit-$m" > /dev/null
  cp "$work/emit-$m/manifest.json" "$work/corpus/seed-$m.json"
done
cd "$work"
"$bin" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 corpus \
  > fuzz.log 2>&1 || { tail -40 fuzz.log; exit 1; }
grep -E "stat::number_of_executed_units|Done" fuzz.log | tail -2
