#!/usr/bin/env bash
# On the GPU machine: kiln's decode path run on the GPU (issue 42; docs/decode.md), after scripts/device_build.sh.
#   - `kiln run --check` of the decode-step fixture (the state's new values against LibTorch's)
#   - the same for hf_llama_decode_long.pt (a cache of 256), and compute-sanitizer memcheck of one forward of it
#   - both entry points of one emitted directory (`kiln compile --emit cuda --prefill-chunk 8`): `kiln run DIR --check`
#     and `kiln run DIR --entry prefill --check`, each against LibTorch running the trace at the entry's shapes
#   - `kiln generate DIR` on that directory gives the ids `kiln generate STEP.pt --prefill-chunk 8` gives
#   - tests/decode/generate_check.py --gpu: `kiln generate` on the GPU against transformers' model.generate for the
#     tiny Llama, Qwen2, Phi-3, Gemma and Gemma-2 steps (f32 ids exactly, token by token and in prefill chunks of 4; bf16 Llama's
#     logits by DESIGN.md's rule; the Llama over a cache of 256 for 150 new tokens)
# Logs under $1 (default /tmp/kiln-decode); the verdicts printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kiln-decode}
mkdir -p "$out"
./build/kiln run models/fixtures/hf_llama_decode_tiny.pt --check > "$out/check.log" 2>&1
echo "kiln run --check (decode fixture, GPU) rc=$?"
grep -E "ran |output|check" "$out/check.log"
./build/kiln run models/fixtures/hf_llama_decode_long.pt --check > "$out/check-long.log" 2>&1
echo "kiln run --check (long decode fixture, GPU) rc=$?"
grep -E "check" "$out/check-long.log"
compute-sanitizer --tool memcheck ./build/kiln run models/fixtures/hf_llama_decode_long.pt > "$out/memcheck-long.log" 2>&1
echo "memcheck (long decode fixture) rc=$?"
grep -E "ERROR SUMMARY" "$out/memcheck-long.log"
rm -rf "$out/entries"
./build/kiln compile models/fixtures/hf_llama_decode_tiny.pt --emit cuda -o "$out/entries" --prefill-chunk 8 > "$out/entries.log" 2>&1
echo "compile --prefill-chunk 8 rc=$?"
for entry in "" prefill; do
  ./build/kiln run "$out/entries" ${entry:+--entry $entry} --check --reference models/fixtures/hf_llama_decode_tiny.pt \
    > "$out/entry-${entry:-step}.log" 2>&1
  echo "kiln run DIR ${entry:+--entry $entry }--check rc=$?"
  grep -E "ran |check" "$out/entry-${entry:-step}.log"
done
# kiln generate DIR (the emitted entries, the manifests' states and decode interface) against kiln generate of the .pt
prompt=5,17,42,7,99,3,250,11
./build/kiln generate "$out/entries" --prompt-ids $prompt --max-new-tokens 20 > "$out/generate-dir.ids" 2> "$out/generate-dir.log"
echo "kiln generate DIR rc=$?"
./build/kiln generate models/fixtures/hf_llama_decode_tiny.pt --prefill-chunk 8 --prompt-ids $prompt --max-new-tokens 20 \
  > "$out/generate-pt.ids" 2> "$out/generate-pt.log"
[ -s "$out/generate-dir.ids" ] && cmp -s "$out/generate-dir.ids" "$out/generate-pt.ids" && echo "kiln generate DIR ids = kiln generate STEP.pt ids: PASS" \
  || echo "kiln generate DIR ids differ from STEP.pt's: FAIL ($(cat "$out/generate-dir.ids") vs $(cat "$out/generate-pt.ids"))"
grep -h "kiln:" "$out/generate-dir.log" | tail -2
python3 tests/decode/generate_check.py ./build/kiln --gpu > "$out/generate.log" 2>&1
echo "generate_check --gpu rc=$?"
grep -vE "Warning|^  |\[transformers\]" "$out/generate.log"
