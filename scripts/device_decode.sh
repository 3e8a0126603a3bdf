#!/usr/bin/env bash
# On the GPU machine: kiln's decode path run on the GPU (issue 42; docs/decode.md), after scripts/device_build.sh.
#   - `kiln run --check` of the decode-step fixture (the state's new values against LibTorch's)
#   - tests/decode/generate_check.py --gpu: `kiln generate` on the GPU against transformers' model.generate for the
#     tiny Llama, Qwen2, Phi-3, Gemma and Gemma-2 steps (f32 ids exactly, token by token and in prefill chunks of 4; bf16 Llama's
#     logits by DESIGN.md's rule)
# Logs under $1 (default /tmp/kiln-decode); the verdicts printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kiln-decode}
mkdir -p "$out"
./build/kiln run models/fixtures/hf_llama_decode_tiny.pt --check > "$out/check.log" 2>&1
echo "kiln run --check (decode fixture, GPU) rc=$?"
grep -E "ran |output|check" "$out/check.log"
python3 tests/decode/generate_check.py ./build/kiln --gpu > "$out/generate.log" 2>&1
echo "generate_check --gpu rc=$?"
grep -vE "Warning|^  |\[transformers\]" "$out/generate.log"
