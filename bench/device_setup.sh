# Sourced by the bench/*_on_device.sh scripts, from the repository root: the shared start of one device call.
# Sets OUT (created), LIMIT (BENCH_LIMIT_SECONDS, default 480: the call's wall-time budget, build included), NAME
# (BENCH_NAME, default <UTC date>-h200), `start` and the CUDA PATH, then builds kiln (scripts/device_build.sh),
# exiting the calling script if that fails. `left` is what remains of LIMIT once kiln is built.
start=$SECONDS
OUT=${OUT:-/tmp/kiln-bench}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
LIMIT=${BENCH_LIMIT_SECONDS:-480}
NAME=${BENCH_NAME:-$(date -u +%F)-h200}
bash scripts/device_build.sh "$OUT/build.log" || exit 1
echo "kiln built in $((SECONDS - start)) s"
left=$((LIMIT - (SECONDS - start)))
