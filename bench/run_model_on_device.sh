#!/usr/bin/env bash
# On the GPU machine, in one device call: build kiln (scripts/device_build.sh), then the whole-model comparison
# (bench/whole_model.py) for at most BENCH_LIMIT_SECONDS (default 480) of wall time, build included. Extra
# arguments go to whole_model.py (e.g. --configs bf16:1:1,f32:1:1). $OUT gets BENCH_NAME-model.json and model.log;
# the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/device_setup.sh
python3 bench/whole_model.py --out "$OUT/$NAME-model.json" --limit-seconds "$left" "$@" > "$OUT/model.log" 2>&1
rc=$?
tail -n 30 "$OUT/model.log"
echo "whole_model rc=$rc; total $((SECONDS - start)) s"
exit $rc
