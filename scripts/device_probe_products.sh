#!/usr/bin/env bash
# On the GPU machine, in one device call: where the time of kiln's wgmma products goes (bench/product_probe.py's
# variants of the emitted kernels). Builds kiln, exports a TinyLlama-shaped bf16 Llama of PROBE_LAYERS layers
# (default 4: the weights of one forward are several times the L2), and per PROBE_SEQS (default "128 512"):
#   1. emits it without tile-overlap-wgmma and writes the variants base, nocopy, nomma, inflight; emits it with the
#      default passes as the variant "compiler";
#   2. `kiln run --check --reference` on inflight and compiler (the variants meant to be right);
#   3. times each variant: `kiln run DIR --bench N` (one CUDA graph) and `--profile` (each kernel alone, hot L2);
#   4. ncu (clocks untouched) on the base variant's product kernels: speed of light, memory, warp stalls.
# $OUT gets probe.txt (the summary, printed last) and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${PROBE_LAYERS:=4}"
: "${PROBE_SEQS:=128 512}"
: "${PROBE_NCU_KERNELS:=k1_reduce_sum|k5_reduce_sum|k7_reduce_sum|k8_reduce_sum_split}"
LOG=$(mktemp -d)
during_build() {
  for s in $PROBE_SEQS; do
    nice -n 19 python3 models/llama.py --hidden 2048 --intermediate 5632 --heads 32 --kv-heads 4 --layers "$PROBE_LAYERS" \
      --vocab 32000 --batch 1 --seq "$s" --dtype bf16 --no-check -o "$LOG/tl-s$s.pt" > "$LOG/export-s$s.log" 2>&1
  done
}
source bench/device_setup.sh
export KILN_CACHE_DIR=$LOG/cache
summary=()
ms() { grep -o '[0-9.]* ms per forward (CUDA events' "$1" | awk '{print $1}' | head -1; }
products() {  # the profile lines of the product kernels: name us/launch
  grep -E '^ +[0-9]+ +k[0-9]+_reduce_sum' "$1" | awk '{printf "%s %s us, ", $2, $4}'
}
for s in $PROBE_SEQS; do
  pt=$LOG/tl-s$s.pt
  # The variants start from the products as they were before tile-overlap-wgmma; "compiler" is the default pipeline.
  ./build/kiln compile "$pt" --emit cuda -o "$LOG/emit-s$s" --disable-pass tile-overlap-wgmma > "$LOG/emit-s$s.log" 2>&1 || { summary+=("s$s: emit failed"); continue; }
  ./build/kiln compile "$pt" --emit cuda -o "$LOG/var-s$s/compiler" >> "$LOG/emit-s$s.log" 2>&1 || { summary+=("s$s: emit failed"); continue; }
  python3 bench/product_probe.py "$LOG/emit-s$s" "$LOG/var-s$s" > "$LOG/variants-s$s.log" 2>&1 || { summary+=("s$s: variants failed: $(tail -3 "$LOG/variants-s$s.log")"); continue; }
  for v in inflight compiler; do
    ./build/kiln run "$LOG/var-s$s/$v" --reference "$pt" --check > "$LOG/check-$v-s$s.log" 2>&1
    summary+=("s$s $v check rc=$? $(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-$v-s$s.log" | head -1)")
  done
  for v in base nocopy nomma inflight compiler base; do
    ./build/kiln run "$LOG/var-s$s/$v" --bench 200 --profile > "$LOG/bench-$v-s$s.log" 2>&1
    summary+=("s$s $v: $(ms "$LOG/bench-$v-s$s.log") ms/fwd (${PROBE_LAYERS} layers); alone: $(products "$LOG/bench-$v-s$s.log")")
    echo "${summary[-1]}"
  done
done
s=${PROBE_SEQS%% *}
timeout 200 ncu --clock-control none -k "regex:^($PROBE_NCU_KERNELS)\$" --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  ./build/kiln run "$LOG/var-s$s/base" > "$LOG/ncu-s$s.txt" 2>&1
summary+=("ncu s$s rc=$?:")
summary+=("$(grep -E '^  k[0-9]+_|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Stall Long Scoreboard|Warp Cycles Per Issued|Achieved Occupancy|Registers Per' "$LOG/ncu-s$s.txt" | head -60)")
tar czf "$OUT/logs.tgz" -C "$LOG" --exclude cache --exclude 'var-*' --exclude 'emit-*' --exclude '*.pt' . 2>/dev/null
{ printf '%s\n' "${summary[@]}"; echo "total $((SECONDS - start)) s"; } | tee "$OUT/probe.txt"
