#!/usr/bin/env bash
# On the GPU machine: the Llama checks of docs/llama.md. Builds kiln (scripts/device_build.sh), then
#  - KILN_STEPS (dtype:batch:seq ...): the TinyLlama-1.1B-shaped transformers Llama (random weights), traced on
#    the GPU, through `kiln run --check` (kiln's kernels against LibTorch on the same GPU), with compile time
#    and a timing (bench/whole_model.py runs the same checks next to PyTorch's timings);
#  - KILN_OWN_STEPS: the same for kiln's own models/llama.py at the TinyLlama-1.1B shape;
#  - on the tiny configs: compute-sanitizer memcheck/racecheck, and f16/bf16 of both Llama sources.
# Each step is bounded so a slow one cannot eat the call; the table is printed last and saved as $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kiln-device}
LOG=$(mktemp -d)
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH KILN_CACHE_DIR=$LOG/cache
STEPS=${KILN_STEPS-"f32:1:128 bf16:1:128 f32:8:128 bf16:8:128"}
OWN_STEPS=${KILN_OWN_STEPS-"f32:1:128 bf16:1:128"}
TINYLLAMA_SHAPE="--hidden 2048 --intermediate 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000"
rows=()
row() { rows+=("$(printf '%-26s %-6s %-11s %-10s %-10s %s' "$@")"); echo "${rows[-1]}"; }
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  nvcc --version | tail -1
} > "$LOG/versions.txt" 2>&1
bash scripts/device_build.sh "$LOG/build.log" || exit 1

for step in $(for x in $STEPS; do echo "hf:$x"; done) $(for x in $OWN_STEPS; do echo "own:$x"; done); do
  IFS=: read -r src dt b s <<< "$step"
  name="$src-tinyllama-$dt-b${b}s$s"
  pt=$LOG/$name.pt
  if [ "$src" = hf ]; then
    export_cmd=(python3 models/hf_llama.py --preset tinyllama --device cuda)
  else
    export_cmd=(python3 models/llama.py $TINYLLAMA_SHAPE)
  fi
  timeout 300 "${export_cmd[@]}" --dtype "$dt" --batch "$b" --seq "$s" --no-check -o "$pt" > "$LOG/export-$name.log" 2>&1 \
    || { row "$name" EXPORT - - - "$(tail -1 "$LOG/export-$name.log")"; continue; }
  start=$SECONDS
  iters=5; [ "$b" -gt 1 ] && iters=2
  timeout 400 ./build/kiln run "$pt" --check --bench "$iters" --time-passes > "$LOG/run-$name.log" 2>&1; rc=$?
  secs=$((SECONDS - start))
  err=$(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/run-$name.log" | awk '{print $2}' | head -1)
  ms=$(grep -o '[0-9.]* ms per forward' "$LOG/run-$name.log" | awk '{print $1}')
  comp=$(grep -E '^ +[0-9.]+ ms +total' "$LOG/run-$name.log" | awk '{printf "%.1f s", $1/1000}')
  row "$name" "$([ $rc = 0 ] && echo PASS || echo "rc=$rc")" "${err:--}" "${ms:--}" "${comp:--}" "wall $secs s"
  rm -f "$pt"
done

python3 models/hf_llama.py --device cuda --no-check -o "$LOG/hf_tiny_f32.pt" > /dev/null 2>&1
for tiny in "$LOG/hf_tiny_f32.pt" models/fixtures/llama_tiny.pt; do
  t=$(basename "$tiny" .pt)
  compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$tiny" > "$LOG/memcheck-$t.log" 2>&1; mc=$?
  compute-sanitizer --tool racecheck --error-exitcode 9 ./build/kiln run "$tiny" > "$LOG/racecheck-$t.log" 2>&1; rcc=$?
  ./build/kiln run "$tiny" --check > "$LOG/check-$t.log" 2>&1; c=$?
  err=$(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-$t.log" | awk '{print $2}' | head -1)
  row "$t" "$([ $c = 0 ] && echo PASS || echo "rc=$c")" "${err:--}" - - "memcheck rc=$mc racecheck rc=$rcc"
done
for dt in f16 bf16; do
  python3 models/hf_llama.py --dtype $dt --device cuda --no-check -o "$LOG/hf_tiny_$dt.pt" > /dev/null 2>&1
  python3 models/llama.py --dtype $dt --no-check -o "$LOG/llama_tiny_$dt.pt" > /dev/null 2>&1
  for t in hf_tiny llama_tiny; do
    ./build/kiln run "$LOG/${t}_$dt.pt" --check > "$LOG/check-${t}_$dt.log" 2>&1; c=$?
    err=$(grep -o 'rel_l2 [0-9.e+-]*' "$LOG/check-${t}_$dt.log" | awk '{print $2}' | head -1)
    row "$t $dt" "$([ $c = 0 ] && echo PASS || echo "rc=$c")" "${err:--}" - - -
  done
done
rm -f "$LOG"/*.pt
tar czf "$OUT/logs.tgz" -C "$LOG" --exclude cache . 2>/dev/null
{
  cat "$LOG/versions.txt"
  printf '%-26s %-6s %-11s %-10s %-10s %s\n' case check rel_l2 ms/fwd compile notes
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/summary.txt"
