#!/usr/bin/env bash
# On the GPU machine, in one device call: the SASS of the kernels of a few suite cases, to see what the generated code
# became (HGMMA: wgmma; UTMALDG: TMA loads; LDGSTS: cp.async; SYNCS: mbarrier operations; STG: global stores by width;
# LDL/STL: local memory, i.e. spills). Builds kiln, traces each case of SASS_CASES ("case:dtype;...") with
# bench/export_cases.py, compiles it (`kiln compile --emit cuda`), then `cuobjdump -sass` and `-res-usage` on every cubin.
# $OUT gets sass-<case>-<kernel>.txt per cubin and sass.txt (one line of counts per kernel, also printed).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${SASS_CASES:=tinyllama/q_proj/s512:bf16;tinyllama/gate_proj/s128:bf16}"
LOG=$(mktemp -d)
IFS=';' read -ra cases <<< "$SASS_CASES"
during_build() {  # the traces, while kiln builds
  for c in "${cases[@]}"; do
    IFS=':' read -r name dtype <<< "$c"
    python3 bench/export_cases.py "$LOG/cases" --dtype "$dtype" --filter "$name" >> "$LOG/export.log" 2>&1
  done
}
source bench/device_setup.sh
for c in "${cases[@]}"; do
  IFS=':' read -r name dtype <<< "$c"
  base=$(echo "$name" | sed 's|/|__|g').$dtype
  pt="$LOG/cases/$base.pt"
  [ -f "$pt" ] || { echo "$name: no trace ($(tail -1 "$LOG/export.log"))" | tee -a "$OUT/sass.txt"; continue; }
  ./build/kiln compile "$pt" --emit cuda -o "$LOG/emit-$base" > "$LOG/emit-$base.log" 2>&1 || { echo "$name: emit failed" | tee -a "$OUT/sass.txt"; continue; }
  for f in "$LOG/emit-$base"/*.cubin; do
    k=$(basename "$f" .cubin)
    cuobjdump -sass "$f" > "$OUT/sass-$base-$k.txt" 2>&1
    regs=$(cuobjdump -res-usage "$f" 2>/dev/null | grep -o 'REG:[0-9]*' | head -1)
    counts=$(for op in HGMMA UTMALDG LDGSTS SYNCS BAR.SYNC STG.E.128 STG.E.64 STG.E LDL STL; do
      printf '%s %s, ' "$op" "$(grep -c "$op" "$OUT/sass-$base-$k.txt")"; done)
    echo "$name $k ($regs): $counts" | tee -a "$OUT/sass.txt"
  done
done
echo "total $((SECONDS - start)) s"
