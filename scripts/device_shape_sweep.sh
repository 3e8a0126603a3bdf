#!/usr/bin/env bash
# On the GPU machine, in one device call: one product case under several tile shapes, to see where tile-shape-products'
# model picks wrong. Builds kiln, exports each case of SWEEP ("name:m:n:k:shape,shape,...;..." with shape TMxTNsSPLIT,
# e.g. "tinyllama/gate_proj/s32:32:5632:2048:64x48s1,64x96s2") as bf16, and for each shape writes a --product-shapes
# table of that one product, then `kiln run --check` once and `kiln run --bench SWEEP_BENCH` (hot, from graphs) and
# `--rotate-mb 512` (operands from HBM), printing µs per forward beside the model's own choice ("model").
# SWEEP_VARIANTS (";"-separated kiln argument lists, default one empty list) runs every shape once per list, e.g.
# ";--enable-pass tile-multicast-operands" for each shape without and with clusters; words of the form NAME=VALUE in a list
# set kiln's environment instead (e.g. "KILN_CACHE_DIR=/tmp/c --disable-pass tile-unroll-rings").
# $OUT gets sweep.txt (also printed) and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${SWEEP:=tinyllama/gate_proj/s32:32:5632:2048:64x48s1,64x48s2}"
: "${SWEEP_BENCH:=2000}"
: "${SWEEP_VARIANTS:=}"
LOG=$(mktemp -d)
IFS=';' read -ra cases <<< "$SWEEP"
IFS=';' read -ra variants <<< "$SWEEP_VARIANTS"
[ ${#variants[@]} -eq 0 ] && variants=("")
during_build() {
  for c in "${cases[@]}"; do
    python3 bench/export_cases.py "$LOG/cases" --dtype bf16 --filter "${c%%:*}" >> "$LOG/export.log" 2>&1
  done
}
source bench/device_setup.sh
export KILN_CACHE_DIR=$LOG/cache
ms() { grep -o '[0-9.]* ms per forward' "$1" | head -1 | awk '{printf "%.2f", $1 * 1000}'; }
for c in "${cases[@]}"; do
  IFS=':' read -r name m n k shapes <<< "$c"
  pt="$LOG/cases/$(echo "$name" | sed 's|/|__|g').bf16.pt"
  [ -f "$pt" ] || { echo "$name: no trace" | tee -a "$OUT/sweep.txt"; continue; }
  for shape in model ${shapes//,/ }; do
   for variant in "${variants[@]}"; do
    read -ra words <<< "$variant"
    envs=(); args=()
    for w in "${words[@]}"; do if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else args+=("$w"); fi; done
    tag=$shape${variant:+ [$variant]}
    if [ "$shape" != model ]; then
      tm=${shape%%x*}; rest=${shape#*x}; tn=${rest%%s*}; split=${rest#*s}
      f="$LOG/$(echo "$name" | sed 's|/|_|g')-$shape.json"
      echo "{\"products\": [{\"type\": \"bf16\", \"m\": $m, \"n\": $n, \"k\": $k, \"tile_m\": $tm, \"tile_n\": $tn, \"split\": $split}]}" > "$f"
      args+=(--product-shapes "$f")
    fi
    l="$LOG/$(echo "$name" | sed 's|/|_|g')-$shape-$(echo "$variant" | tr -c 'a-z0-9\n' '_')"
    env "${envs[@]}" ./build/kiln compile "$pt" --explain-schedule "${args[@]}" > "$l.schedule" 2>&1
    env "${envs[@]}" ./build/kiln run "$pt" --check "${args[@]}" > "$l.check" 2>&1; rc=$?
    env "${envs[@]}" ./build/kiln run "$pt" --bench "$SWEEP_BENCH" "${args[@]}" > "$l.hot" 2>&1
    env "${envs[@]}" ./build/kiln run "$pt" --bench "$SWEEP_BENCH" --rotate-mb 512 "${args[@]}" > "$l.rot" 2>&1
    used=$(grep -c 'from --product-shapes' "$l.schedule")
    echo "$name $tag: check rc=$rc $(grep -o 'rel_l2 [0-9.e+-]*' "$l.check" | head -1), hot $(ms "$l.hot") us, rotated $(ms "$l.rot") us$([ "$shape" != model ] && [ "$used" = 0 ] && echo ' (table not used)') | $(grep -o 'tile [0-9x]* ([^)]*)' "$l.schedule" | head -1) $(grep -o 'clusters of [0-9]*' "$l.schedule" | head -1) $(grep -o 'a producer warp' "$l.schedule" | head -1) $(grep -o 'x[0-9]* ring' "$l.schedule" | head -1) $(grep -o 'grid [0-9]* x [0-9]* threads' "$l.schedule" | head -1)" | tee -a "$OUT/sweep.txt"
   done
  done
done
tar czf "$OUT/logs.tgz" -C "$LOG" --exclude cache --exclude cases . 2>/dev/null
echo "total $((SECONDS - start)) s"
