#!/usr/bin/env bash
# On the GPU machine, in one device call: the flash-attention work (issue 13) in one place. Builds kiln, then
#   1. models/fixtures/attention_bf16.pt (causal sdpa and a sliding-window eager chain, GQA, 100 tokens; attention_f32.pt
#      when ATTENTION_MODEL_DTYPE is f32) and llama_medium in ATTENTION_MODEL_DTYPE (default: the first of
#      ATTENTION_DTYPES; kiln's own Llama, 2 layers, hidden 512, 2 x 256 tokens): `kiln run --check`, then
#      compute-sanitizer memcheck and racecheck (each bounded by KILN_SANITIZE_SECONDS, default 90);
#   2. the run cache on the GPU: a cached entry runs again (`compiled nothing`), a truncated cubin in it is reported
#      as damaged and rebuilt, and both runs pass --check;
#   3. the SASS of an attention kernel (HMMA, LDSM, LDGSTS, spills);
#   4. the whole TinyLlama-shaped model, ATTENTION_MODEL_DTYPE 1 x 128 (bench/whole_model.py --kiln-graph --kiln-profile):
#      ATTENTION_MODEL_SIDES (default kiln, eager and torch.compile reduce-overhead) with the default passes, kiln alone
#      with ATTENTION_BASELINE_ARGS
#      (default: --disable-pass loop-fuse-attention), side by side in one run;
#   5. the suite's attention rows (sdpa_causal_gqa, attention_naive) in ATTENTION_DTYPES (default bf16), for what is
#      left of BENCH_LIMIT_SECONDS (default 560) of wall time.
# $OUT gets attention.txt (the short summary, also printed last), model*.json, the suite's JSON/.md and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=560}"
: "${ATTENTION_FILTER:=sdpa_causal_gqa,attention_naive}"
: "${ATTENTION_DTYPES:=bf16}"
: "${ATTENTION_MODEL_DTYPE:=${ATTENTION_DTYPES%%,*}}"
: "${ATTENTION_MODEL_SIDES:=kiln,eager,compile_reduce_overhead}"
fixture=models/fixtures/attention_bf16.pt; [ "$ATTENTION_MODEL_DTYPE" = f32 ] && fixture=models/fixtures/attention_f32.pt
: "${ATTENTION_BASELINE_ARGS:=--disable-pass loop-fuse-attention}"
: "${ATTENTION_VARIANTS:=default baseline}"   # whole-model runs: `default` only skips the baseline
: "${ATTENTION_CACHE_CHECK:=1}"               # 0 skips step 2
: "${ATTENTION_NCU_CASE:=}"                   # a suite case (e.g. tinyllama/sdpa_causal_gqa/s512): ncu on its bf16 kernel
: "${ATTENTION_AB_ARGS:=}"                    # kiln arguments of a second suite run over ATTENTION_AB_FILTER (an A/B)
: "${ATTENTION_AB_FILTER:=s512}"
NAME=${BENCH_NAME:-$(date -u +%F)-h200-attention}
during_build() { exec nice -n 19 python3 bench/run_suite.py --export-only --dtype "$ATTENTION_DTYPES" --filter "$ATTENTION_FILTER" > "$OUT/export.log" 2>&1; }
source bench/device_setup.sh
LOG=$(mktemp -d)
export KILN_CACHE_DIR=$LOG/cache
summary=()
t() { grep -o '[0-9.]* ms per forward (CUDA events' "$1" | awk '{print $1}' | head -1; }
bound=${KILN_SANITIZE_SECONDS:-90}

python3 models/llama.py --hidden 512 --intermediate 1536 --heads 8 --kv-heads 4 --layers 2 --vocab 4096 \
  --batch 2 --seq 256 --dtype "$ATTENTION_MODEL_DTYPE" --no-check -o "$LOG/medium.pt" > "$LOG/export-medium.log" 2>&1
for m in $fixture "$LOG/medium.pt"; do
  n=$(basename "$m" .pt)
  ./build/kiln compile "$m" --explain-schedule > "$LOG/$n-schedules.txt" 2>&1
  ./build/kiln run "$m" --check --bench 20 > "$LOG/check-$n.log" 2>&1; rc=$?
  timeout "$bound" compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$m" > "$LOG/memcheck-$n.log" 2>&1; mc=$?
  timeout "$bound" compute-sanitizer --tool racecheck --error-exitcode 9 ./build/kiln run "$m" > "$LOG/racecheck-$n.log" 2>&1; rcc=$?
  summary+=("$n: check rc=$rc $(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-$n.log" | head -2 | tr '\n' ' '), $(t "$LOG/check-$n.log") ms/fwd, memcheck=$mc racecheck=$rcc, flash kernels: $(grep -c 'flash_attention' "$LOG/$n-schedules.txt")")
  echo "${summary[-1]}"
done

# The run cache on the GPU (manifest format 2): reuse, then a damaged entry rebuilt.
if [ "$ATTENTION_CACHE_CHECK" = 1 ]; then
m=models/fixtures/hf_llama_tiny_bf16.pt
./build/kiln run $m --check > "$LOG/cache-1.log" 2>&1; c1=$?
./build/kiln run $m --check > "$LOG/cache-2.log" 2>&1; c2=$?
cubin=$(find "$KILN_CACHE_DIR" -path '*hf_llama_tiny_bf16*' -name '*.cubin' 2>/dev/null | sort | head -1)
[ -z "$cubin" ] && cubin=$(ls -t $(find "$KILN_CACHE_DIR" -name '*.cubin') | head -1)
truncate -s 100 "$cubin"
./build/kiln run $m --check > "$LOG/cache-3.log" 2>&1; c3=$?
summary+=("cache: first rc=$c1 ($(grep -c 'compiled [0-9]* kernels' "$LOG/cache-1.log") compiled), again rc=$c2 ($(grep -c 'compiled nothing' "$LOG/cache-2.log") from cache), truncated $(basename "$cubin"): rc=$c3, $(grep -o 'the cache entry is damaged[^;]*' "$LOG/cache-3.log" | head -1)")
echo "${summary[-1]}"
fi

if [ -n "$ATTENTION_NCU_CASE" ]; then
  python3 - "$ATTENTION_NCU_CASE" "$LOG/ncu-case.pt" > "$LOG/ncu-export.log" 2>&1 <<'PY'
import sys
sys.path[:0] = ["bench", "models"]
import cases as suite
from kiln_export import export
case = suite.select(filter_substring=sys.argv[1])[0]
inputs = case.make_inputs("bf16")
if not isinstance(inputs, dict):
    inputs = dict(zip(["q", "k", "v"], inputs))
export(case.build_module("bf16"), inputs, sys.argv[2])
PY
  ./build/kiln run "$LOG/ncu-case.pt" > /dev/null 2>&1
  timeout 120 ncu --clock-control none --kernel-name regex:attention --section SpeedOfLight --section WarpStateStats \
    --section Occupancy --section LaunchStats ./build/kiln run "$LOG/ncu-case.pt" > "$LOG/ncu.txt" 2>&1
  summary+=("ncu $ATTENTION_NCU_CASE: $(grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall' "$LOG/ncu.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-600)")
  echo "${summary[-1]}"
fi

for f in $(find "$KILN_CACHE_DIR" -name '*attention*.cubin' | sort); do
  cuobjdump -sass "$f" > "$LOG/sass-attention.txt" 2>/dev/null || continue
  summary+=("sass $(basename "$f"): $(for op in HMMA FFMA LDS.128 LDSM LDGSTS SHFL MUFU.EX2 BAR.SYNC LDL STL; do printf '%s %s, ' "$op" "$(grep -c "$op" "$LOG/sass-attention.txt")"; done)")
  echo "${summary[-1]}"; break
done

for variant in $ATTENTION_VARIANTS; do
  extra=(); sides=$ATTENTION_MODEL_SIDES
  [ $variant = baseline ] && { extra=(--kiln-args "$ATTENTION_BASELINE_ARGS"); sides=kiln; }
  python3 bench/whole_model.py --configs "$ATTENTION_MODEL_DTYPE":1:128 --sides $sides --kiln-graph --kiln-profile "${extra[@]}" \
    --commit "${KILN_COMMIT:-unknown}" --out "$OUT/model-$variant.json" > "$LOG/model-$variant.log" 2>&1
  python3 bench/summarize_model.py "$OUT/model-$variant.json" -o "$LOG/model-$variant" >> "$LOG/model-$variant.log" 2>&1
  summary+=("whole model $ATTENTION_MODEL_DTYPE 1x128, $variant ${extra[*]}:" "$(tail -n 8 "$LOG/model-$variant.log" | head -n 6)")
  printf '%s\n' "${summary[-2]}" "${summary[-1]}"
done

suite_rows "$ATTENTION_DTYPES" "$ATTENTION_FILTER"
if [ -n "$ATTENTION_AB_ARGS" ]; then
  ab_filter=$(echo "$ATTENTION_FILTER" | tr ',' '\n' | sed "s|\$|/$ATTENTION_AB_FILTER|" | paste -sd,)
  python3 bench/run_suite.py --dtype "$ATTENTION_DTYPES" --filter "$ab_filter" --kiln-args "$ATTENTION_AB_ARGS" \
    --out "$LOG/$NAME-ab.json" --commit "${KILN_COMMIT:-unknown}" > "$LOG/suite-ab.log" 2>&1
  python3 bench/summarize.py "$LOG/$NAME-ab.json" -o "$LOG/$NAME-ab" >> "$LOG/suite-ab.log" 2>&1
  summary+=("A/B with $ATTENTION_AB_ARGS:" "$(awk '/^## bf16/{p=1} p' "$LOG/$NAME-ab.md" | cut -d'|' -f1-6 | head -12)")
fi
finish_call attention.txt "$ATTENTION_MODEL_DTYPE"
