#!/usr/bin/env bash
# On the GPU machine: whether passes pay, on one model in one call: `kiln run MODEL --check` with every pass on, then
# `kiln run MODEL --bench N` (graph replay, then launched one by one) with every pass on, with each named pass disabled
# alone and with all of them disabled, in rounds (the configurations alternate, so drift in the GPU's state spreads
# over all of them). After scripts/device_build.sh.
#   usage: scripts/device_passes_ab.sh MODEL OUT PASS [PASS ...]
#   knobs: AB_ITERS (forwards per timing, default 200), AB_ROUNDS (default 3), AB_ARGS (extra `kiln run` options)
# Prints a table (configuration, ms per forward in each round, kernels per forward); logs under OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 2; }
model=$1 out=$2
shift 2
mkdir -p "$out"
iters=${AB_ITERS:-200} rounds=${AB_ROUNDS:-3}
./build/kiln run "$model" --check ${AB_ARGS:-} > "$out/check.log" 2>&1
echo "kiln run --check (every pass on) rc=$?"
grep -E "output 0|check" "$out/check.log" | cut -c1-200
configs=("all on")
for p in "$@"; do configs+=("without $p"); done
[ $# -gt 1 ] && configs+=("without all")
flags() {  # the --disable-pass options of a configuration
  case "$1" in
    "all on") ;;
    "without all") for p in "${@:2}"; do printf -- '--disable-pass %s ' "$p"; done ;;
    *) printf -- '--disable-pass %s' "${1#without }" ;;
  esac
}
declare -A graph launched kernels
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    log="$out/bench-${c// /_}-$r.log"
    # shellcheck disable=SC2046
    ./build/kiln run "$model" --bench "$iters" -v ${AB_ARGS:-} $(flags "$c" "$@") > "$log" 2>&1 || echo "FAILED: $c (round $r), see $log"
    graph[$c]+="$(grep 'replayed from' "$log" | grep -oE '[0-9.]+ ms per forward' | cut -d' ' -f1) "
    launched[$c]+="$(grep 'launched back to back' "$log" | grep -oE '[0-9.]+ ms per forward' | cut -d' ' -f1) "
    kernels[$c]=$(grep -oE 'kiln: [0-9]+ kernels,' "$log" | head -1 | grep -oE '[0-9]+')
  done
done
printf '| configuration | graph replay, ms per forward (rounds) | launched, ms per forward | kernels |\n|---|---|---|---|\n'
for c in "${configs[@]}"; do printf '| %s | %s| %s| %s |\n' "$c" "${graph[$c]}" "${launched[$c]}" "${kernels[$c]}"; done
