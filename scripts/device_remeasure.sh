#!/usr/bin/env bash
# On the GPU machine: kiln re-measured at one commit (issue 49 part 1) in two device calls, back to back on one warm
# machine (the second reuses the first's build/ and trace cache):
#
#   KILN_COMMIT=<sha> bash scripts/device_remeasure.sh model   # the cold call: build kiln (the suite's 168 rows traced
#       meanwhile, niced), then the TinyLlama-shaped transformers model (bench/whole_model.py --kiln-graph) at
#       MODEL_CONFIGS (default bf16 1x128, 1x1, 8x128, f32 1x128), each `--check`ed, kiln launched and from one
#       CUDA graph, eager and MODEL_SIDES (default torch.compile default and reduce-overhead)
#   KILN_COMMIT=<sha> bash scripts/device_remeasure.sh suite   # the suite (bench/run_suite.py, kiln rotated and hot
#       from one CUDA graph, eager rotated and hot): the 36 memory-bound rows with torch.compile, then the other 132
#       rows with torch.compile only if SUITE_COMPILE_ALL=1, all within BENCH_LIMIT_SECONDS (build included)
#
# $OUT gets BENCH_NAME-{model,suite-mb,suite-rest}-KILN_COMMIT.json, the suite's .md and .png (bench/summarize.py
# over both parts), versions-*.txt and the logs; the short tables are printed last. KILN_COMMIT is required: the
# device copy's git does not know the working tree's commit.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: device_remeasure.sh model|suite}
: "${KILN_COMMIT:?KILN_COMMIT=<sha> is required}"
: "${BENCH_LIMIT_SECONDS:=550}"
: "${MODEL_CONFIGS:=bf16:1:128,bf16:1:1,bf16:8:128,f32:1:128}"
: "${MODEL_SIDES:=kiln,compile,compile_reduce_overhead}"
: "${SUITE_KILN_TARGET_MS:=50}"
MB=rmsnorm,softmax,silu_mul
REST=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,o_proj_residual,sdpa_causal_gqa,attention_naive,silu_mul_down
[ "$what" = model ] && during_build() { exec nice -n 19 python3 bench/run_suite.py --export-only > "$OUT/export.log" 2>&1; }
source bench/device_setup.sh   # OUT, LIMIT, NAME, start; builds kiln (and waits for during_build)
P=$OUT/$NAME
left() { echo $((LIMIT - (SECONDS - start))); }
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nvcc --version | tail -1; ./build/kiln --version | head -1; echo "KILN_COMMIT $KILN_COMMIT"
} > "$OUT/versions-$what.txt" 2>&1
if [ "$what" = model ]; then
  python3 bench/whole_model.py --configs "$MODEL_CONFIGS" --sides "$MODEL_SIDES" --kiln-graph --commit "$KILN_COMMIT" \
    --limit-seconds "$(left)" --out "$P-model-$KILN_COMMIT.json" > "$OUT/model.log" 2>&1
  echo "whole_model rc=$?"; tail -n 14 "$OUT/model.log"
else
  common=(--kiln-target-ms "$SUITE_KILN_TARGET_MS" --commit "$KILN_COMMIT")
  python3 bench/run_suite.py --filter $MB --compile "${common[@]}" --limit-seconds "$(left)" \
    --out "$P-suite-mb-$KILN_COMMIT.json" > "$OUT/suite-mb.log" 2>&1; echo "memory-bound rows rc=$? at $((SECONDS - start)) s"
  compile=(); [ "${SUITE_COMPILE_ALL:-0}" = 1 ] && compile=(--compile)
  python3 bench/run_suite.py --filter $REST "${compile[@]}" "${common[@]}" --limit-seconds "$(left)" \
    --out "$P-suite-rest-$KILN_COMMIT.json" > "$OUT/suite-rest.log" 2>&1; echo "other rows rc=$? at $((SECONDS - start)) s"
  python3 bench/summarize.py "$P-suite-mb-$KILN_COMMIT.json" "$P-suite-rest-$KILN_COMMIT.json" -o "$P-suite-$KILN_COMMIT" \
    > "$OUT/summarize.log" 2>&1 || tail -n 20 "$OUT/summarize.log"
  awk '/^## Summary/{p=1} /^## (f32|bf16)$/{p=0} p' "$P-suite-$KILN_COMMIT.md"
  grep -hE "rows in |not run|NOT RUN" "$OUT"/suite-*.log
fi
tar czf "$OUT/logs-$what.tgz" -C "$OUT" --remove-files $(cd "$OUT" && ls *.log 2>/dev/null) 2>/dev/null
echo "total $((SECONDS - start)) s"
