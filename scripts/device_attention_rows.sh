#!/usr/bin/env bash
# On the GPU machine, in one device call: kiln's attention at the suite's long rows against itself and PyTorch. Builds
# kiln, then
#   1. each of ROWS_FIXTURES (default models/fixtures/attention_bf16.pt and attention_f32.pt: paired query blocks, bf16
#      and f32; any model file): `kiln run --check`, compute-sanitizer memcheck and racecheck, the SASS counts of the
#      first one's kernel, all with ROWS_KILN_ARGS (e.g. "--enable-pass NAME");
#   2. bench/kiln_variants.py over ROWS_FILTER (default: sdpa_causal_gqa and attention_naive at 512 tokens, both models)
#      with ROWS_VARIANTS (default: kiln as it is, without tile-balance-attention, with tile-attention-scores-by-wgmma):
#      each case checked against LibTorch and timed hot, for at most ROWS_VARIANTS_SECONDS (default 240);
#   3. the suite's rows for ROWS_FILTER (kiln as it is beside eager, bf16), for what is left of BENCH_LIMIT_SECONDS
#      (ROWS_SUITE=0: not);
#   0. with ROWS_TEMPLATES=1, while kiln builds: tests/unit/gpu_check_kernel_templates.cu (kiln_ops.cuh on the GPU);
#   4. with ROWS_MODEL=1, first: the whole TinyLlama-shaped model, bf16 1 x 128 (bench/whole_model.py --kiln-graph
#      --kiln-profile beside eager and torch.compile reduce-overhead) to $OUT/model.json.
# $OUT gets rows.txt (the short summary, also printed last), variants.json, the suite's JSON/.md and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=540}"
: "${ROWS_FIXTURES=models/fixtures/attention_bf16.pt models/fixtures/attention_f32.pt}"
: "${ROWS_FILTER:=tinyllama/sdpa_causal_gqa/s512,qwen2.5-7b/sdpa_causal_gqa/s512,tinyllama/attention_naive/s512,qwen2.5-7b/attention_naive/s512}"
: "${ROWS_VARIANTS=default;-tile-balance-attention;+tile-attention-scores-by-wgmma}"  # empty: no variants
NAME=${BENCH_NAME:-$(date -u +%F)-h200-attention-rows}
if [ "${ROWS_TEMPLATES:-0}" = 1 ]; then
  during_build() {
    export PATH=/usr/local/cuda/bin:$PATH
    { nvcc -arch=sm_90a -O3 -std=c++17 -Werror all-warnings tests/unit/gpu_check_kernel_templates.cu -o /tmp/kiln-templates &&
        /tmp/kiln-templates; } > /tmp/kiln-templates.log 2>&1
  }
fi
source bench/device_setup.sh
LOG=$(mktemp -d)
export KILN_CACHE_DIR=$LOG/cache
summary=()
[ "${ROWS_TEMPLATES:-0}" = 1 ] && summary+=("kiln_ops.cuh on the GPU: $(tail -n 3 /tmp/kiln-templates.log | tr '\n' ' ')")
bound=${KILN_SANITIZE_SECONDS:-90}

if [ "${ROWS_MODEL:-0}" = 1 ]; then
  python3 bench/whole_model.py --configs bf16:1:128 --sides kiln,eager,compile_reduce_overhead --kiln-graph --kiln-profile \
    --commit "${KILN_COMMIT:-unknown}" --out "$OUT/model.json" > "$LOG/model-default.log" 2>&1
  python3 bench/summarize_model.py "$OUT/model.json" -o "$LOG/model-default" >> "$LOG/model-default.log" 2>&1
  summary+=("whole model bf16 1x128:" "$(tail -n 8 "$LOG/model-default.log" | head -n 6)")
  printf '%s\n' "${summary[-2]}" "${summary[-1]}"
fi
read -ra kargs <<< "${ROWS_KILN_ARGS:-}"
for m in $ROWS_FIXTURES; do
  n=$(basename "$m" .pt)
  ./build/kiln compile "$m" --explain-schedule "${kargs[@]}" > "$LOG/$n-schedules.txt" 2>&1
  ./build/kiln run "$m" --check --bench 20 "${kargs[@]}" > "$LOG/check-$n.log" 2>&1; rc=$?
  timeout "$bound" compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$m" "${kargs[@]}" > "$LOG/memcheck-$n.log" 2>&1; mc=$?
  timeout "$bound" compute-sanitizer --tool racecheck --error-exitcode 9 ./build/kiln run "$m" "${kargs[@]}" > "$LOG/racecheck-$n.log" 2>&1; rcc=$?
  summary+=("$n: check rc=$rc $(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-$n.log" | head -2 | tr '\n' ' '), memcheck=$mc racecheck=$rcc; $(grep -c 'paired' "$LOG/$n-schedules.txt") paired")
  echo "${summary[-1]}"
done
for f in $(find "$KILN_CACHE_DIR" -name '*attention*.cubin' | sort); do
  cuobjdump -sass "$f" > "$LOG/sass-attention.txt" 2>/dev/null || continue
  summary+=("sass $(basename "$f"): $(for op in HMMA LDSM LDGSTS SHFL MUFU.EX2 BAR.SYNC LDL STL; do printf '%s %s, ' "$op" "$(grep -c "$op" "$LOG/sass-attention.txt")"; done)")
  echo "${summary[-1]}"; break
done

[ -n "$ROWS_VARIANTS" ] && python3 bench/kiln_variants.py --filter "$ROWS_FILTER" --dtype bf16 --variants "$ROWS_VARIANTS" --limit-seconds "${ROWS_VARIANTS_SECONDS:-240}" --out "$OUT/variants.json" \
  > "$LOG/variants.log" 2>&1
if [ -n "$ROWS_VARIANTS" ]; then
  summary+=("kiln_variants:" "$(grep -v '^\s*$' "$LOG/variants.log" | tail -n "${ROWS_VARIANTS_LINES:-14}")")
  printf '%s\n' "${summary[-2]}" "${summary[-1]}"
fi

[ "${ROWS_SUITE:-1}" = 1 ] && suite_rows bf16 "$ROWS_FILTER"
finish_call rows.txt bf16
