# Sourced by the bench/*_on_device.sh scripts, from the repository root: the shared start of one device call.
# Sets OUT (created), LIMIT (BENCH_LIMIT_SECONDS, default 480: the call's wall-time budget, build included), NAME
# (BENCH_NAME, default <UTC date>-h200), `start` and the CUDA PATH, then builds kiln (scripts/device_build.sh),
# exiting the calling script if that fails. If the caller defined a function `during_build`, it runs in the
# background while kiln builds and is waited for. `left` is what remains of LIMIT after both.
start=$SECONDS
OUT=${OUT:-/tmp/kiln-bench}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
LIMIT=${BENCH_LIMIT_SECONDS:-480}
NAME=${BENCH_NAME:-$(date -u +%F)-h200}
during=""
if declare -F during_build > /dev/null; then during_build & during=$!; fi
bash scripts/device_build.sh "$OUT/build.log" || { [ -n "$during" ] && kill "$during"; exit 1; }
echo "kiln built in $((SECONDS - start)) s"
if [ -n "$during" ]; then wait "$during"; echo "during_build ended (rc $?) at $((SECONDS - start)) s"; fi
left=$((LIMIT - (SECONDS - start)))

# For the scripts/device_*.sh calls (they set LOG, a scratch directory, and fill the array `summary`):
# suite_rows DTYPE FILTER: the suite's rows matching FILTER within what is left of LIMIT, to $OUT/$NAME.{json,md}.
suite_rows() {
  python3 bench/run_suite.py --dtype "$1" --filter "$2" --out "$OUT/$NAME.json" --limit-seconds "$((LIMIT - (SECONDS - start)))" \
    --commit "${KILN_COMMIT:-unknown}" > "$LOG/suite.log" 2>&1
  python3 bench/summarize.py "$OUT/$NAME.json" -o "$OUT/$NAME" >> "$LOG/suite.log" 2>&1
}
# finish_call FILE [DTYPE]: logs packed into $OUT/logs.tgz (the device returns at most 8 files); the summary, the whole-model
# tables ($LOG/model-{default,baseline}.md) and the suite's table for DTYPE (default bf16) printed and written to $OUT/FILE.
finish_call() {
  mv "$OUT/build.log" "$OUT/export.log" "$LOG/" 2>/dev/null; rm -f "$OUT/$NAME.png"
  tar czf "$OUT/logs.tgz" -C "$LOG" --exclude cache . 2>/dev/null
  {
    printf '%s\n' "${summary[@]}"
    for v in default baseline; do [ -f "$LOG/model-$v.md" ] && { echo "== model $v"; grep -A14 -i 'kernel' "$LOG/model-$v.md" | head -30; }; done
    [ -f "$OUT/$NAME.md" ] && awk '/^## Summary/{p=1} /^What L2/{p=0} p' "$OUT/$NAME.md"
    [ -f "$OUT/$NAME.md" ] && awk -v d="## ${2:-bf16}" '$0 == d {p=1; next} /^## /{p=0} p' "$OUT/$NAME.md" | cut -d'|' -f1-6,9 | head -50
    grep -E "rows in|not run" "$LOG/suite.log"
    echo "total $((SECONDS - start)) s"
  } | tee "$OUT/$1"
}
