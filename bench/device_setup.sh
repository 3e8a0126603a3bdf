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
