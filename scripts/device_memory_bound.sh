#!/usr/bin/env bash
# One device call for the memory-bound kernels (issue 11, item 4): the 36 rmsnorm/softmax/silu_mul suite rows with
# torch.compile (bench/run_on_device.sh, BENCH_LIMIT_SECONDS, default 420), then a look inside the s512 kernels
# where time is left: ncu (--clock-control none: speed of light, memory workload, occupancy, warp states) on kiln's
# kernel and on torch.compile's for the cases in PROFILE_CASES, and each kiln kernel's registers and spills.
# Writes under $OUT: the suite's files, ncu.txt, sass.txt. Prints the suite's table and a short ncu digest last.
#
#   KILN_COMMIT=<sha> bash scripts/device_memory_bound.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=420}"
: "${PROFILE_CASES:=tinyllama__softmax__s512.bf16 tinyllama__silu_mul__s512.bf16 tinyllama__rmsnorm__s512.bf16 qwen2.5-7b__rmsnorm__s512.bf16}"
export BENCH_LIMIT_SECONDS
OUT=${OUT:-/tmp/kiln-mb}
mkdir -p "$OUT"
bash bench/run_on_device.sh --filter rmsnorm,softmax,silu_mul --compile > "$OUT/suite-summary.txt" 2>&1
rc=$?
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
      --section LaunchStats -k 'regex:triton' -c 1 python3 bench/profile_compiled.py "$c" 2>&1 |
      grep -vE '^==PROF==' | tail -n 80
  done
} > "$OUT/ncu.txt" 2>&1
{
  for cubin in $(find "$KILN_CACHE_DIR" -name '*.cubin' | head -n 200); do
    echo "== $cubin"; cuobjdump -res-usage "$cubin" 2>&1 | grep -E 'Function|REG' | head -n 4
  done
} > "$OUT/sass.txt" 2>&1
cat "$OUT/suite-summary.txt" | tail -n 80
echo "== ncu digest"
grep -E '^== |Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|L2 Hit|Waves Per SM' "$OUT/ncu.txt" | head -n 120
exit $rc
