#!/usr/bin/env bash
# On the GPU machine, in one device call: mixture-of-experts layers (issue 48).
#   1. builds kiln (scripts/device_build.sh);
#   2. `kiln run --check` of the tiny grouped_mm fixtures at 16 and 64 tokens, f32 and bf16 (at 64 tokens the expert
#      products' row tiles skip the experts they do not hold: loop-batch-expert-products), and compute-sanitizer
#      memcheck and racecheck of the tiny Mixtral at 64 tokens in bf16;
#   3. bench/moe_layers.py on MOE_FAMILIES (default mixtral) at MOE_TOKENS (default 1,128) with torch.compile and,
#      when MOE_WITHOUT names a pass, kiln without it on the same trace (MOE_EXTRA: more arguments).
# $OUT gets moe.txt (the tables, printed last), moe_layers.json and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${MOE_FAMILIES:=mixtral}"
: "${MOE_TOKENS:=1,128}"
: "${MOE_WITHOUT:=loop-batch-expert-products}"
: "${MOE_EXTRA:=}"
: "${MOE_SANITIZE:=1}"
OUT=${OUT:-/tmp/moe-out}
LOG=$(mktemp -d)
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
bash scripts/device_build.sh "$LOG/build.log" || exit 1
kiln=build/kiln
report=$OUT/moe.txt
echo "## tiny grouped_mm fixtures, kiln run --check on the GPU" > "$report"
echo "| fixture | tokens | dtype | check | worst rel_l2 |" >> "$report"
echo "|---|---|---|---|---|" >> "$report"
for f in mixtral qwen3_moe deepseek_v3 gpt_oss; do
  for tokens in 16 64; do
    for dtype in f32 bf16; do
      extra=()
      [ "$dtype" = bf16 ] && extra=(--dtype bf16)
      log=$LOG/check-$f-$tokens-$dtype.log
      $kiln run "models/fixtures/hf_${f}_tiny_grouped.pt" --check --input "input_ids=1x$tokens:i64" "${extra[@]}" > "$log" 2>&1
      rc=$?
      rel=$(grep -oE 'rel_l2 [0-9.e+-]+' "$log" | awk '{print $2}' | sort -g | tail -1)
      echo "| hf_${f}_tiny_grouped | $tokens | $dtype | $([ $rc = 0 ] && grep -q 'check passed' "$log" && echo PASS || echo "FAIL rc=$rc") | $rel |" >> "$report"
    done
  done
done
if [ "$MOE_SANITIZE" = 1 ]; then
  for tool in memcheck racecheck; do
    log=$LOG/$tool.log
    timeout 200 compute-sanitizer --tool $tool $kiln run models/fixtures/hf_mixtral_tiny_grouped.pt --input input_ids=1x64:i64 \
      --dtype bf16 > "$log" 2>&1
    echo "compute-sanitizer $tool, hf_mixtral_tiny_grouped at 64 tokens, bf16: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)" >> "$report"
  done
fi
echo >> "$report"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
bandwidth=3.35e12  # H100 SXM's HBM3; the H200's HBM3e moves 4.8 TB/s
case "$gpu" in *H200*) bandwidth=4.8e12 ;; esac
echo "GPU: $gpu (floor at $bandwidth B/s)" >> "$report"
without=()
[ -n "$MOE_WITHOUT" ] && without=(--without "$MOE_WITHOUT")
# shellcheck disable=SC2086
python3 bench/moe_layers.py "$kiln" --families "$MOE_FAMILIES" --tokens "$MOE_TOKENS" --compile --profile "${without[@]}" --bandwidth "$bandwidth" \
  --out "$LOG/layers" $MOE_EXTRA > "$LOG/layers.txt" 2> "$LOG/layers.err"
echo "bench/moe_layers.py rc=$?" >> "$report"
grep -E '^\|' "$LOG/layers.txt" >> "$report"
cp "$LOG/layers/moe_layers.json" "$OUT/" 2>/dev/null
rm -f "$LOG"/layers/*.pt
tar czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null
cat "$report"
