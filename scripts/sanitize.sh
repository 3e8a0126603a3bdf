#!/usr/bin/env bash
# Builds kiln and its unit tests with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ and runs the
# unit tests (tests/unit, gtest) there, in as many shards as the machine has cores: every kiln process the CLI tests
# start is the sanitized build too. Any report fails the run (halt_on_error); leaks are not checked (LibTorch keeps its
# allocations to the end of the process). Not in CI (the whole unit suite under the sanitizers takes hours on 2 cores);
# run it before resolving a hardening issue and say in the note what ran and how long it took.
#   usage: scripts/sanitize.sh [hardening | all | GTEST_FILTER]     (default hardening; logs: build-asan/sanitize-N.log)
#   hardening: the tests of untrusted input and of the CLI and runtime API (manifests, .pt records, IR parsers, output
#   paths, bindings): 240 tests, 4–6 minutes on 2 cores after the build (2026-12-07).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
HARDENING='RuntimeManifest*:RuntimeApi*:HostileFiles*:*Parser*:OutputDir*:OutputFile*:Inspect*:ModelState*:ManifestStates*'
HARDENING+=':ArchMismatch*:IndexExpr*:Inputs*:CliOutput*:CliOpt*:CliRunJson*:Runtime.*:PassFailure*:KernelVerifier*'
HARDENING+=':MemoryPlan*:TuneSpace*:TuneCli*:Cli.*:CliExpression*'
case "${1:-hardening}" in
  hardening) filter=$HARDENING ;;
  all) filter='*' ;;
  *) filter=$1 ;;
esac
TORCH_PREFIX=$(${PYTHON:-python3} -c 'import torch;print(torch.utils.cmake_prefix_path)')
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
LAUNCHER=(); command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TORCH_PREFIX="$TORCH_PREFIX" \
  "${LAUNCHER[@]}" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
start=$(date +%s)
cmake --build build-asan -j "${KILN_JOBS:-$(nproc)}" --target kiln kiln_tests
built=$(date +%s)
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:detect_odr_violation=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
shards=${KILN_JOBS:-$(nproc)}
pids=()
for s in $(seq 0 $((shards - 1))); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$s ./build-asan/kiln_tests --gtest_filter="$filter" \
    > "build-asan/sanitize-$s.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
end=$(date +%s)
grep -hE "ERROR: AddressSanitizer|runtime error:|^\[  (FAILED|PASSED)  \]" build-asan/sanitize-*.log | head -40 || true
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s in $shards shards, exit $rc (logs: build-asan/sanitize-N.log)"
exit $rc
