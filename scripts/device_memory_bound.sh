#!/usr/bin/env bash
# One device call for the memory-bound kernels (issue 11, item 4):
#  1. the 36 rmsnorm/softmax/silu_mul suite rows with torch.compile (bench/run_on_device.sh, BENCH_LIMIT_SECONDS,
#     default 330, build included);
#  2. ncu (--clock-control none: speed of light, memory workload, occupancy, launch, warp states) on kiln's kernel
#     and on torch.compile's for each case of PROFILE_CASES (trace stems; default the bf16 TinyLlama softmax s512);
#  3. tests/unit/gpu_check_kernel_templates.cu (kiln_ops.cuh's building blocks, exp/silu/sigmoid accuracy included)
#     and `kiln run --check` on every model in models/fixtures.
# $OUT gets BENCH_NAME.json/.md, ncu.txt, checks.txt and build.log (the device tool returns at most 8 files); the
# suite's table, the ncu digest and the checks are printed last.
#
#   KILN_COMMIT=<sha> BENCH_NAME=<date>-h200-mb-<sha> bash scripts/device_memory_bound.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=330}"
: "${PROFILE_CASES:=tinyllama__softmax__s512.bf16}"
export BENCH_LIMIT_SECONDS
FINAL=${OUT:-/tmp/kiln-mb}
mkdir -p "$FINAL"
export OUT=$(mktemp -d)   # run_on_device.sh writes more files than come back; the chosen ones are copied below
NAME=${BENCH_NAME:-$(date -u +%F)-h200}
export BENCH_NAME=$NAME
bash bench/run_on_device.sh --filter rmsnorm,softmax,silu_mul --compile > "$OUT/suite-summary.txt" 2>&1
rc=$?
cp "$OUT/$NAME.json" "$OUT/$NAME.md" "$OUT/build.log" "$FINAL/" 2>/dev/null
traces=$(ls -d bench/.cache/traces/cuda-* 2>/dev/null | head -n 1)
export KILN_CACHE_DIR=$PWD/bench/.cache/kiln PATH=/usr/local/cuda/bin:$PATH
{
  for c in $PROFILE_CASES; do
    pt=$traces/$c.pt
    [ -f "$pt" ] || { echo "== $c: no trace"; continue; }
    echo "== $c: kiln"
    timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats -k 'regex:^k[0-9]' -c 1 ./build/kiln run "$pt" --bench 2 2>&1 |
      grep -vE '^(==PROF==|kiln:)' | tail -n 120
    echo "== $c: torch.compile"
    timeout 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats -k 'regex:triton' -c 1 python3 bench/profile_compiled.py "$c" 2>&1 |
      grep -vE '^==PROF==' | tail -n 120
  done
} > "$FINAL/ncu.txt" 2>&1
{
  echo "== kiln_ops.cuh on the GPU"
  nvcc -arch=sm_90a -O3 -std=c++17 -Werror all-warnings tests/unit/gpu_check_kernel_templates.cu -o /tmp/kiln-templates \
    && /tmp/kiln-templates
  echo "== kiln run --check, models/fixtures"
  for pt in models/fixtures/*.pt; do
    m=$(basename "$pt" .pt)
    timeout 120 ./build/kiln run "$pt" --check > /tmp/kiln-check-$m.log 2>&1; crc=$?
    printf '%-16s rc %s  %s\n' "$m" "$crc" "$(grep -E 'PASS|FAIL|rel_l2' /tmp/kiln-check-$m.log | tail -n 1)"
  done
} > "$FINAL/checks.txt" 2>&1
tail -n 75 "$OUT/suite-summary.txt"
echo "== ncu digest"
grep -E '^== |Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|Warp Cycles Per Issued' "$FINAL/ncu.txt" | head -n 40
cat "$FINAL/checks.txt"
exit $rc
