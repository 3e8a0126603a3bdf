#!/usr/bin/env bash
# The README test command's slice of the OpInfo conformance check (tests/conformance/opinfo_check.py): 60 samples,
# chosen by the day (seed = days since 1970), so that successive days cover different samples; a failing day's seed
# is printed, and KILN_CONFORMANCE_SEED=S reruns that choice. Usage: run_sample.sh KILN_BINARY
set -euo pipefail
seed=${KILN_CONFORMANCE_SEED:-$(( $(date -u +%s) / 86400 ))}
exec python3 "$(dirname "$0")/opinfo_check.py" --kiln "$1" --sample "${KILN_CONFORMANCE_SAMPLES:-60}" --seed "$seed"
