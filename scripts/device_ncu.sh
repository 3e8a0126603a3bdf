#!/usr/bin/env bash
# On the GPU machine, in one device call: Nsight Compute on the kernels of a few suite cases, to see what limits them.
# Builds kiln, traces each case of NCU_CASES ("case:dtype:kernel-regex;..." e.g.
# "tinyllama/q_proj/s512:bf16:reduce_sum;tinyllama/sdpa_causal_gqa/s512:bf16:attention") with bench/export_cases.py,
# runs it once (compiles into the cache), then ncu (--clock-control none) on the first matching launch: speed of light,
# warp stall reasons, pipe utilisation, shared-memory wavefronts and bank conflicts, occupancy.
# NCU_METRICS (comma-separated metric names) adds raw metrics to each report; NCU_KILN_ARGS are kiln arguments for every
# case (e.g. "--enable-pass tile-attention-scores-by-wgmma"); NCU_SOURCE=1 also writes source-<n>.csv, the SASS of the kernel
# with each instruction's sampled warp stalls (ncu's source page), and prints the instructions where most samples fell.
# $OUT gets ncu-<n>.txt per case and ncu.txt (the key lines, also printed).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${NCU_CASES:=tinyllama/q_proj/s512:bf16:reduce_sum}"
LOG=$(mktemp -d)
IFS=';' read -ra cases <<< "$NCU_CASES"
during_build() {  # the traces, while kiln builds
  for c in "${cases[@]}"; do
    IFS=':' read -r name dtype regex <<< "$c"
    python3 bench/export_cases.py "$LOG/cases" --dtype "$dtype" --filter "$name" >> "$LOG/export.log" 2>&1
  done
}
source bench/device_setup.sh
export KILN_CACHE_DIR=$LOG/cache
n=0
for c in "${cases[@]}"; do
  IFS=':' read -r name dtype regex <<< "$c"
  n=$((n + 1))
  pt="$LOG/cases/$(echo "$name" | sed 's|/|__|g').$dtype.pt"
  [ -f "$pt" ] || { echo "$name: no trace ($(tail -1 "$LOG/export.log"))" | tee -a "$OUT/ncu.txt"; continue; }
  read -ra kargs <<< "${NCU_KILN_ARGS:-}"
  ./build/kiln run "$pt" "${kargs[@]}" > "$LOG/run-$n.log" 2>&1
  timeout 150 ncu --clock-control none --kernel-name "regex:$regex" --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section Occupancy \
    --section LaunchStats ${NCU_METRICS:+--metrics "$NCU_METRICS"} ./build/kiln run "$pt" "${kargs[@]}" > "$OUT/ncu-$n.txt" 2>&1
  if [ "${NCU_SOURCE:-0}" = 1 ]; then
    timeout 150 ncu --clock-control none --kernel-name "regex:$regex" --launch-count 1 --section SourceCounters \
      --section WarpStateStats -f -o "$LOG/source-$n" ./build/kiln run "$pt" "${kargs[@]}" > "$LOG/source-run-$n.log" 2>&1
    ncu --import "$LOG/source-$n.ncu-rep" --page source --csv --print-source sass > "$OUT/source-$n.csv" 2> "$LOG/source-$n.err"
  fi
  { echo "== $name $dtype ($regex)"
    [ -s "$OUT/source-$n.csv" ] && python3 bench/stall_hotspots.py "$OUT/source-$n.csv" 2>&1 | head -40
    grep -E "^  [a-z0-9_]+ \(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Dynamic Shared|Issue Slots Busy|Executed Ipc Active|Stall|stall|Bank Conflicts|Wavefronts|Tensor|Pipe|Cluster|sm__|launch__" "$OUT/ncu-$n.txt" | tr -s ' ' | cut -c1-160 | head -40
  } | tee -a "$OUT/ncu.txt"
done
echo "total $((SECONDS - start)) s" | tee -a "$OUT/ncu.txt"
