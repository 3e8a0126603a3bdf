#!/usr/bin/env bash
# On the GPU machine, in one device call: the matrix-product work in one place, in PRODUCTS_DTYPE (bf16, the default,
# or f32). Builds kiln, then
#   1. llama_medium (kiln's own Llama, 2 layers, hidden 512, MEDIUM_BATCH x MEDIUM_SEQ tokens, default 2 x 256: tiled, pipelined products): `kiln run
#      --check` (with MEDIUM_ARGS, e.g. --enable-pass NAME, here and under the sanitizers), then compute-sanitizer memcheck and racecheck (each bounded by KILN_SANITIZE_SECONDS, default 90;
#      124 = ran past the bound), with the default passes; the SASS instruction mix of one product kernel;
#   1b. a 4-layer TinyLlama-shaped model at 128 tokens under each of PRODUCTS_VARIANTS ("name:kiln args;..."):
#      `kiln run --bench 200 --profile` (the forward from one graph; each product kernel alone);
#   2. the whole TinyLlama-shaped model, 1 x 128 (bench/whole_model.py --kiln-graph --kiln-profile), with the
#      default passes and with PRODUCTS_BASELINE_ARGS (default: --disable-pass tile-warpgroup-products for bf16,
#      --disable-pass tile-stream-ffma-products for f32), so the change is measured side by side in one run
#      (PRODUCTS_MODEL_VARIANTS: which of "default baseline" run; empty: neither);
#   3. the suite's nn.Linear-kind rows (bench/run_suite.py --filter PRODUCTS_FILTER), for what is left of
#      BENCH_LIMIT_SECONDS (default 560) of wall time.
# $OUT gets products.txt (the short summary, also printed last), model*.json, the suite's JSON/.md and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=560}"
: "${PRODUCTS_FILTER:=q_proj,k_proj,o_proj,gate_proj,down_proj,o_proj_residual,silu_mul_down}"
: "${PRODUCTS_DTYPE:=bf16}"
if [ "$PRODUCTS_DTYPE" = f32 ]; then : "${PRODUCTS_BASELINE_ARGS:=--disable-pass tile-stream-ffma-products}"; SASS_MARK=LDS.128
else : "${PRODUCTS_BASELINE_ARGS:=--disable-pass tile-warpgroup-products}"; SASS_MARK=HGMMA; fi
NAME=${BENCH_NAME:-$(date -u +%F)-h200-products}
: "${PRODUCTS_VARIANTS:=}"
LOG=$(mktemp -d)
during_build() {
  nice -n 19 python3 models/llama.py --hidden 2048 --intermediate 5632 --heads 32 --kv-heads 4 --layers 4 --vocab 32000 \
    --batch 1 --seq 128 --dtype "$PRODUCTS_DTYPE" --no-check -o "$LOG/tl4.pt" > "$LOG/export-tl4.log" 2>&1
  exec nice -n 19 python3 bench/run_suite.py --export-only --dtype "$PRODUCTS_DTYPE" --filter "$PRODUCTS_FILTER" > "$OUT/export.log" 2>&1
}
source bench/device_setup.sh
export KILN_CACHE_DIR=$LOG/cache
summary=()
t() { grep -o '[0-9.]* ms per forward (CUDA events' "$1" | awk '{print $1}' | head -1; }

python3 models/llama.py --hidden 512 --intermediate 1536 --heads 8 --kv-heads 4 --layers 2 --vocab 4096 \
  --batch "${MEDIUM_BATCH:-2}" --seq "${MEDIUM_SEQ:-256}" --dtype "$PRODUCTS_DTYPE" --no-check -o "$LOG/medium.pt" > "$LOG/export-medium.log" 2>&1
# shellcheck disable=SC2086
./build/kiln compile "$LOG/medium.pt" --ir tile ${MEDIUM_ARGS:-} > "$LOG/medium-tile.txt" 2>&1
bound=${KILN_SANITIZE_SECONDS:-90}
# Bounded too (KILN_CHECK_SECONDS, default 120): a kernel that never finishes (an mbarrier phase that never completes)
# must not take the whole call.
timeout "${KILN_CHECK_SECONDS:-120}" ./build/kiln run "$LOG/medium.pt" --check --bench 20 ${MEDIUM_ARGS:-} > "$LOG/check-medium.log" 2>&1; rc=$?
timeout "$bound" compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$LOG/medium.pt" ${MEDIUM_ARGS:-} > "$LOG/memcheck-medium.log" 2>&1; mc=$?
timeout "$bound" compute-sanitizer --tool racecheck --error-exitcode 9 ./build/kiln run "$LOG/medium.pt" ${MEDIUM_ARGS:-} > "$LOG/racecheck-medium.log" 2>&1; rcc=$?
summary+=("llama_medium $PRODUCTS_DTYPE: check rc=$rc $(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-medium.log" | head -1), $(t "$LOG/check-medium.log") ms/fwd, memcheck=$mc racecheck=$rcc, pipelined products: $(grep -c 'cp_async\|tma' "$LOG/medium-tile.txt") ($(grep -c ': tma' "$LOG/medium-tile.txt") by tma, $(grep -c 'clusters of' "$LOG/medium-tile.txt") in clusters)")
echo "${summary[-1]}"
if [ "$rc" = 124 ]; then summary+=("llama_medium's check ran past ${KILN_CHECK_SECONDS:-120} s: stopped here"); finish_call products.txt "$PRODUCTS_DTYPE"; exit 1; fi
# The SASS of one product of llama_medium (HGMMA: wgmma; LDS.128: 16-byte shared loads; LDGSTS: cp.async; UTMALDG: TMA;
# LDL/STL: spills).
for f in $(find "$KILN_CACHE_DIR" -name '*reduce_sum*.cubin' | sort); do  # the products
  cuobjdump -sass "$f" > "$LOG/sass.txt" 2>/dev/null || continue
  grep -q "$SASS_MARK" "$LOG/sass.txt" || continue
  summary+=("sass $(basename "$f"): $(for op in HGMMA FFMA LDS.128 LDS LDGSTS UTMALDG BAR.SYNC LDL STL; do printf '%s %s, ' "$op" "$(grep -c "$op" "$LOG/sass.txt")"; done)")
  echo "${summary[-1]}"; cp "$LOG/sass.txt" "$LOG/sass-product.txt"; break
done

IFS=';' read -ra variants <<< "$PRODUCTS_VARIANTS"
for v in "${variants[@]}"; do
  name=${v%%:*}; args=${v#*:}
  # shellcheck disable=SC2086
  ./build/kiln run "$LOG/tl4.pt" --bench 200 --profile $args > "$LOG/tl4-$name.log" 2>&1
  summary+=("tl4 $name ($args): rc=$? $(t "$LOG/tl4-$name.log") ms/fwd; alone: $(grep -E '^ +[0-9]+ +k[0-9]+_reduce_sum' "$LOG/tl4-$name.log" | awk '{printf "%s %s, ", $2, $4}')")
  echo "${summary[-1]}"
done

for variant in ${PRODUCTS_MODEL_VARIANTS-default baseline}; do
  extra=(); [ $variant = baseline ] && extra=(--kiln-args "$PRODUCTS_BASELINE_ARGS")
  python3 bench/whole_model.py --configs "$PRODUCTS_DTYPE":1:128 --sides kiln --kiln-graph --kiln-profile "${extra[@]}" \
    --commit "${KILN_COMMIT:-unknown}" --out "$OUT/model-$variant.json" > "$LOG/model-$variant.log" 2>&1
  python3 bench/summarize_model.py "$OUT/model-$variant.json" -o "$LOG/model-$variant" >> "$LOG/model-$variant.log" 2>&1
  summary+=("whole model $PRODUCTS_DTYPE 1x128, $variant ${extra[*]}:" "$(tail -n 8 "$LOG/model-$variant.log" | head -n 4)")
  printf '%s\n' "${summary[-2]}" "${summary[-1]}"
done

suite_rows "$PRODUCTS_DTYPE" "$PRODUCTS_FILTER"
finish_call products.txt "$PRODUCTS_DTYPE"
