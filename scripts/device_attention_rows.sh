#!/usr/bin/env bash
# On the GPU machine, in one device call: kiln's attention at the suite's long rows against itself and PyTorch. Builds
# kiln, then
#   1. ROWS_FIXTURE (default models/fixtures/attention_bf16_512.pt, the fixture whose schedule tile-widen-attention-warps
#      changes): `kiln run --check`, compute-sanitizer memcheck and racecheck, the SASS counts of its kernel;
#   2. bench/kiln_variants.py over ROWS_FILTER (default: sdpa_causal_gqa and attention_naive at 512 tokens, both models)
#      with ROWS_VARIANTS (default: kiln as it is, without tile-balance-attention, without tile-widen-attention-warps):
#      each case checked against LibTorch and timed hot;
#   3. the suite's rows for ROWS_FILTER (kiln as it is beside eager, bf16), for what is left of BENCH_LIMIT_SECONDS.
# $OUT gets rows.txt (the short summary, also printed last), variants.json, the suite's JSON/.md and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=540}"
: "${ROWS_FIXTURE:=models/fixtures/attention_bf16_512.pt}"
: "${ROWS_FILTER:=tinyllama/sdpa_causal_gqa/s512,qwen2.5-7b/sdpa_causal_gqa/s512,tinyllama/attention_naive/s512,qwen2.5-7b/attention_naive/s512}"
: "${ROWS_VARIANTS:=default;-tile-balance-attention;-tile-widen-attention-warps}"
NAME=${BENCH_NAME:-$(date -u +%F)-h200-attention-rows}
source bench/device_setup.sh
LOG=$(mktemp -d)
export KILN_CACHE_DIR=$LOG/cache
summary=()
bound=${KILN_SANITIZE_SECONDS:-90}

m=$ROWS_FIXTURE n=$(basename "$ROWS_FIXTURE" .pt)
./build/kiln compile "$m" --explain-schedule > "$LOG/$n-schedules.txt" 2>&1
./build/kiln run "$m" --check --bench 20 > "$LOG/check-$n.log" 2>&1; rc=$?
timeout "$bound" compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$m" > "$LOG/memcheck-$n.log" 2>&1; mc=$?
timeout "$bound" compute-sanitizer --tool racecheck --error-exitcode 9 ./build/kiln run "$m" > "$LOG/racecheck-$n.log" 2>&1; rcc=$?
summary+=("$n: check rc=$rc $(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-$n.log" | head -1), memcheck=$mc racecheck=$rcc; $(grep -o 'warps [0-9]* of [0-9]* rows' "$LOG/$n-schedules.txt" | head -1)")
echo "${summary[-1]}"
for f in $(find "$KILN_CACHE_DIR" -name '*attention*.cubin' | sort); do
  cuobjdump -sass "$f" > "$LOG/sass-attention.txt" 2>/dev/null || continue
  summary+=("sass $(basename "$f"): $(for op in HMMA LDSM LDGSTS SHFL MUFU.EX2 BAR.SYNC LDL STL; do printf '%s %s, ' "$op" "$(grep -c "$op" "$LOG/sass-attention.txt")"; done)")
  echo "${summary[-1]}"; break
done

python3 bench/kiln_variants.py --filter "$ROWS_FILTER" --dtype bf16 --variants "$ROWS_VARIANTS" --limit-seconds 240 --out "$OUT/variants.json" \
  > "$LOG/variants.log" 2>&1
summary+=("kiln_variants (rc $?):" "$(grep -v '^\s*$' "$LOG/variants.log" | tail -n 14)")
printf '%s\n' "${summary[-2]}" "${summary[-1]}"

suite_rows bf16 "$ROWS_FILTER"
finish_call rows.txt bf16
