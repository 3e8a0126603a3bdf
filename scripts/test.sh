#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's second command; CI runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# Fixtures are committed; regenerate any that are missing.
# (plain_trace.py and exported_programs.py write theirs at test time; four scripts name their fixture otherwise.)
for m in models/*.py; do
  case "$m" in */kiln_export.py|*/export_all.py|*/plain_trace.py|*/exported_programs.py) continue ;; esac
  name=$(basename "$m" .py)
  case "$name" in llama|hf_llama) name=${name}_tiny ;; hf_families) name=hf_gpt2_tiny ;; hf_decode) name=hf_llama_decode_tiny ;; esac
  [ -f "models/fixtures/$name.pt" ] || { python3 models/export_all.py; break; }
done
cd build && ctest --output-on-failure -j "$(nproc)"
