#!/usr/bin/env bash
# On the GPU machine, in one device call: build kiln while the rows are traced (niced, into the trace cache), run
# the kernel suite (bench/run_suite.py) for what is left of BENCH_LIMIT_SECONDS (default 540) of wall time, build
# included, and summarise. Extra arguments go to run_suite.py.
#
#   KILN_COMMIT=<sha> bash bench/run_on_device.sh                                       # 168 rows, kiln + eager
#   KILN_COMMIT=<sha> bash bench/run_on_device.sh --filter rmsnorm,softmax,silu_mul --compile   # 36 rows + torch.compile
#
# KILN_COMMIT (or --commit) is the commit recorded in the JSON: the device's .git can lag behind the tree.
# Rows already in bench/results/$BENCH_NAME*.json (BENCH_NAME defaults to <UTC date>-h200) are skipped, so a second
# call, with the first call's JSON copied into bench/results/ (an untracked file travels with the tree), continues
# where the first stopped and writes the merged file. $OUT gets BENCH_NAME.json, .md, .png, suite.log, export.log and
# build.log (the device tool returns only what is under $OUT); the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BENCH_LIMIT_SECONDS:=540}"
NAME=${BENCH_NAME:-$(date -u +%F)-h200}
resume=()
for f in bench/results/"$NAME"*.json; do [ -f "$f" ] && resume+=("$f"); done
args=("$@")
[ -n "${KILN_COMMIT:-}" ] || [[ " $* " == *" --commit "* ]] ||
  echo "warning: no KILN_COMMIT or --commit: the JSON records the device's git HEAD, which can lag behind the tree"
during_build() {   # exec: $! is python itself
  exec nice -n 19 python3 bench/run_suite.py --export-only --resume "${resume[@]}" "${args[@]}" > "$OUT/export.log" 2>&1
}
source bench/device_setup.sh

python3 bench/run_suite.py --out "$OUT/$NAME.json" --resume "${resume[@]}" --limit-seconds "$left" "$@" \
  > "$OUT/suite.log" 2>&1
rc=$?
if python3 bench/summarize.py "$OUT/$NAME.json" -o "$OUT/$NAME" >> "$OUT/suite.log" 2>&1; then
  awk '/^## Summary/{p=1} /^## (f32|bf16)$/{p=0} p' "$OUT/$NAME.md"   # summary, L2, memory-bound kinds
  grep -A 40 -E "^[0-9]+ rows in " "$OUT/suite.log" | head -n 42
else
  echo "summarize failed (see suite.log)"; tail -n 60 "$OUT/suite.log"
fi
echo "run_suite rc=$rc; total $((SECONDS - start)) s"
exit $rc
