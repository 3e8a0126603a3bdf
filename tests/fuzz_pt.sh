#!/usr/bin/env bash
# Fuzzes the .pt import (fuzz/pt_fuzzer.cpp) with libFuzzer, from seeds made of the fixtures (fuzz/pt_records.py):
# FUZZ_RUNS inputs (default 4000) from a fixed seed, so the run is the same every time (the CTest), or, with
# FUZZ_SECONDS set, for that long from a random seed (a longer search). Fails on any crash, uncaught exception (kiln::InternalError included), multi-line
# error, timeout or out-of-memory; the input that caused it is kept in $BUILD/fuzz/ (crash-*, oom-*, timeout-*).
# The CTest Fuzz.PtImport runs this; a longer run: FUZZ_SECONDS=3600 bash tests/fuzz_pt.sh build. Replay one input
# with what kiln said about it: KILN_PT_FUZZ_VERBOSE=1 build/fuzz/pt_fuzzer FILE. The inputs of fuzz/regressions/pt/ (crashes
# found earlier, kept as the harness reads them) are replayed first, every run.
# Needs clang++ with libFuzzer (Debian's clang, installed by scripts/setup.sh), python3, and the kiln libraries and
# LibTorch of the build in $BUILD (the harness links them; only the harness itself is instrumented).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${1:-build}" && pwd)
if [ -n "${FUZZ_SECONDS:-}" ]; then budget=(-max_total_time="$FUZZ_SECONDS"); else budget=(-runs="${FUZZ_RUNS:-4000}" -seed=1); fi
work="$BUILD/fuzz"
# Seeds, corpus, log and temporary archives of this run only (pt-*-PID): a CTest run beside a long search must not
# re-seed its corpus, truncate its log or delete its files. They go when the run ends well; a failed run keeps them.
run="pt-run-$$" seeds="$work/pt-seeds-$$" log="pt-fuzz-$$.log"
mkdir -p "$seeds"
CXX=${FUZZ_CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz_pt: $CXX not found (bash scripts/setup.sh installs clang)" >&2; exit 1; }
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')
libs=(driver.a cuda.a kernel.a tile.a loop.a tensor.a runtime.a frontend.a torch.a support.a)
bin="$work/pt_fuzzer"
if [ ! -x "$bin" ] || [ -n "$(find fuzz/pt_fuzzer.cpp "${libs[@]/#/$BUILD/libkiln_}" -newer "$bin" -print -quit 2>/dev/null)" ]; then
  "$CXX" -std=c++17 -g -O1 -fsanitize=fuzzer -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Iinclude -isystem "$TORCH/include" \
    fuzz/pt_fuzzer.cpp "${libs[@]/#/$BUILD/libkiln_}" -ldl -lfmt -Wl,-rpath,"$TORCH/lib" -L"$TORCH/lib" \
    -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -o "$bin"
fi
for m in mlp linear layers elementwise attention_bf16 hf_gpt2_tiny; do
  python3 fuzz/pt_records.py "models/fixtures/$m.pt" "$seeds/seed-$m"
done
# Inputs that once failed (fuzz/regressions/pt/) run first, once each: each must now import or fail in one line.
regressions=("$PWD"/fuzz/regressions/pt/*)
cd "$work"
TMPDIR="$work" "$bin" -timeout=30 -rss_limit_mb=6144 "${regressions[@]}" > "pt-regressions-$$.log" 2>&1 &
fuzzer=$!
wait "$fuzzer" || { echo "fuzz_pt: a regression input fails again"; tail -40 "pt-regressions-$$.log"; exit 1; }
rm -f "pt-regressions-$$.log" "kiln-pt-fuzz-$fuzzer.pt"
cp -r "$seeds" "$work/$run"  # each run starts from the seeds alone
TMPDIR="$work" "$bin" "${budget[@]}" -timeout=30 -rss_limit_mb=6144 -max_len=1048576 -print_final_stats=1 "$run" > "$log" 2>&1 &
fuzzer=$!
wait "$fuzzer" || { tail -40 "$log"; echo "fuzz_pt: the whole log is $work/$log"; exit 1; }
rm -rf "$seeds" "$run" "kiln-pt-fuzz-$fuzzer.pt"
grep -E "stat::number_of_executed_units|Done" "$log" | tail -2
rm -f "$log"
