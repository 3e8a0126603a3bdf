#!/usr/bin/env bash
# On the GPU machine: kiln re-measured at one commit (issue 49 part 1) in two device calls, back to back on one warm
# machine (the second reuses the first's build/ and trace cache):
#
#   KILN_COMMIT=<sha> bash scripts/device_remeasure.sh model   # the cold call: build kiln (the suite's 168 rows traced
#       meanwhile, niced), then the TinyLlama-shaped transformers model (bench/whole_model.py --kiln-graph) at
#       MODEL_CONFIGS (default bf16 1x128, 1x1, 8x128, f32 1x128), each `--check`ed, kiln launched and from one
#       CUDA graph, eager and MODEL_SIDES (default torch.compile default and reduce-overhead)
#   KILN_COMMIT=<sha> bash scripts/device_remeasure.sh prep    # a cold call before `suite` when the whole suite must
#       fit one call: build kiln while the 168 rows are traced, then phase 1 only (kiln compile + --check, the
#       memory-bound rows' cold torch.compile) of every row into bench/.cache and Inductor's cache; nothing timed
#   KILN_COMMIT=<sha> bash scripts/device_remeasure.sh suite   # the suite (bench/run_suite.py, kiln rotated and hot
#       from one CUDA graph, eager rotated and hot): the 36 memory-bound rows with torch.compile, then the other 132
#       rows with torch.compile only if SUITE_COMPILE_ALL=1, all within BENCH_LIMIT_SECONDS (build included)
#
# $OUT gets BENCH_NAME-{model,suite-mb,suite-rest}-KILN_COMMIT.json, the suite's .md and .png (bench/summarize.py
# over both parts), versions-*.txt and the logs; the short tables are printed last. KILN_COMMIT is required: the
# device copy's git does not know the working tree's commit.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: device_remeasure.sh model|prep|suite}
: "${KILN_COMMIT:?KILN_COMMIT=<sha> is required}"
: "${BENCH_LIMIT_SECONDS:=550}"
: "${MODEL_CONFIGS:=bf16:1:128,bf16:1:1,bf16:8:128,f32:1:128}"
: "${MODEL_SIDES:=kiln,compile,compile_reduce_overhead}"
: "${SUITE_KILN_TARGET_MS:=50}"
MB=rmsnorm,softmax,silu_mul
REST=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,o_proj_residual,sdpa_causal_gqa,attention_naive,silu_mul_down
# Inductor's caches where a warm machine keeps them for the next call (run_suite only sets a per-run default)
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/bench/.cache/inductor}
[ "$what" != suite ] && during_build() { exec nice -n 19 python3 bench/run_suite.py --export-only > "$OUT/export.log" 2>&1; }
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
elif [ "$what" = prep ]; then
  # Both parts prepare at once (8 workers each); each process is stopped once its phase 1 is over.
  prepare() {  # prepare NAME FILTER [ARGS]: phase 1 of the rows matching FILTER, stopped before phase 2
    local name=$1 filter=$2; shift 2
    python3 bench/run_suite.py --filter "$filter" "$@" --jobs 8 --limit-seconds 3600 --commit "$KILN_COMMIT" \
      --out "/tmp/prep-$name.json" > "$OUT/prep-$name.log" 2>&1 &
    local pid=$!
    until grep -q "rows prepared" "$OUT/prep-$name.log" || ! kill -0 $pid 2>/dev/null; do sleep 1; done
    pkill -P $pid; kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "prepared $name at $((SECONDS - start)) s: $(grep -E '^phase 1: [0-9]+ rows prepared' "$OUT/prep-$name.log")"
  }
  prepare mb "$MB" --compile & prepare rest "$REST" & wait
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
