#!/usr/bin/env bash
# On the GPU machine, in one device call: build kiln (incrementally when this machine built it before), then
# run the kernel suite for at most BENCH_LIMIT_SECONDS (default 480) of wall time, including the build, and
# summarise. Extra arguments go to bench/run_suite.py (e.g. --dtype f32, --filter tinyllama, --max-autotune).
#
#   bash bench/run_on_device.sh                      # as much of the suite as fits; results in $OUT
#
# Cases already in bench/results/$BENCH_NAME*.json (BENCH_NAME defaults to <UTC date>-h200) are skipped, so
# a second call, with the first call's JSON copied into bench/results/ (an untracked file travels with the
# tree), continues where the first stopped and writes the merged file. $OUT gets BENCH_NAME.json, .md, .png
# and suite.log (the device tool returns only what is under $OUT).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_setup.sh

resume=()
for f in bench/results/"$NAME"*.json; do [ -f "$f" ] && resume+=("$f"); done
python3 bench/run_suite.py --out "$OUT/$NAME.json" --resume "${resume[@]}" --limit-seconds "$left" "$@" \
  > "$OUT/suite.log" 2>&1
rc=$?
python3 bench/summarize.py "$OUT/$NAME.json" -o "$OUT/$NAME" >> "$OUT/suite.log" 2>&1 || echo "summarize failed (see suite.log)"
tail -n 200 "$OUT/suite.log"
echo "run_suite rc=$rc; total $((SECONDS - start)) s"
exit $rc
