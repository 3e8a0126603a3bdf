#!/usr/bin/env bash
# On the GPU machine, in one device call: mixture-of-experts layers (issue 48).
#   1. builds kiln (scripts/device_build.sh);
#   2. `kiln run --check` of the tiny grouped_mm fixtures at 16 and 64 tokens (f32), and of the tiny grouped Mixtral and
#      Qwen3-MoE traced in bf16 at 64 tokens (the expert products' row tiles skip the experts they do not hold:
#      loop-batch-expert-products; bf16 copies them by TMA), and compute-sanitizer memcheck and racecheck of the bf16
#      Mixtral;
#      (MOE_CHECKS=0 and MOE_SANITIZE=0 skip them: a call short of time goes straight to the timings);
#   3. bench/moe_layers.py on MOE_FAMILIES (default mixtral) at MOE_TOKENS (default 1,128) with torch.compile and,
#      when MOE_WITHOUT names a pass, kiln without it on the same trace (MOE_EXTRA: more arguments).
# $OUT gets moe.txt (the tables, printed last), moe_layers.json and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${MOE_FAMILIES:=mixtral}"
: "${MOE_TOKENS:=1,128}"
: "${MOE_WITHOUT:=loop-batch-expert-products}"
: "${MOE_EXTRA:=}"
: "${MOE_CHECKS:=1}"
: "${MOE_SANITIZE:=1}"
OUT=${OUT:-/tmp/moe-out}
LOG=$(mktemp -d)
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
bash scripts/device_build.sh "$LOG/build.log" || exit 1
kiln=build/kiln
report=$OUT/moe.txt
# bf16 traces of the tiny grouped_mm Mixtral and Qwen3-MoE at 64 tokens (the fixtures are f32; --dtype cannot recast them)
python3 - "$LOG" > "$LOG/tiny-bf16.log" 2>&1 <<'EOF2'
import sys, torch
sys.path.insert(0, "models")
import hf_families
from hf_llama import example_inputs
from kiln_export import export
for family in ("mixtral", "qwen3_moe"):
    model = hf_families.build(family, experts="grouped_mm").to(torch.bfloat16)
    export(model, example_inputs(256, seq=64), f"{sys.argv[1]}/{family}_tiny_bf16_64.pt")
EOF2
echo "## tiny grouped_mm models, kiln run --check on the GPU" > "$report"
echo "| model | tokens | check | worst rel_l2 |" >> "$report"
echo "|---|---|---|---|" >> "$report"
check() {  # NAME TOKENS MODEL [ARGS...]
  local name=$1 tokens=$2 model=$3 log=$LOG/check-$1-$2.log
  shift 3
  $kiln run "$model" --check "$@" > "$log" 2>&1
  local rc=$?
  local rel
  rel=$(grep -oE 'rel_l2 [0-9.e+-]+' "$log" | awk '{print $2}' | sort -g | tail -1)
  echo "| $name | $tokens | $([ $rc = 0 ] && grep -q 'check passed' "$log" && echo PASS || echo "FAIL rc=$rc") | $rel |" >> "$report"
}
for f in mixtral qwen3_moe deepseek_v3 gpt_oss; do
  [ "$MOE_CHECKS" = 1 ] || break
  for tokens in 16 64; do
    check "hf_${f}_tiny_grouped f32" $tokens "models/fixtures/hf_${f}_tiny_grouped.pt" --input "input_ids=1x$tokens:i64"
  done
done
[ "$MOE_CHECKS" = 1 ] && for f in mixtral qwen3_moe; do check "${f} tiny grouped bf16" 64 "$LOG/${f}_tiny_bf16_64.pt"; done
if [ "$MOE_SANITIZE" = 1 ]; then
  for tool in memcheck racecheck; do
    log=$LOG/$tool.log
    timeout 200 compute-sanitizer --tool $tool $kiln run "$LOG/mixtral_tiny_bf16_64.pt" > "$log" 2>&1
    echo "compute-sanitizer $tool, the tiny grouped Mixtral at 64 tokens in bf16: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)" >> "$report"
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
