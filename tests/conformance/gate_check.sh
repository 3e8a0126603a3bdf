#!/usr/bin/env bash
# The conformance check's gate on refusals (tests/conformance/opinfo_check.py): OpInfo's f32 samples of pow include
# tensor exponents, which kiln refuses. Against an empty list of reviewed refusals the check must fail and call them
# new; against the committed refused.txt it must pass. Usage: gate_check.sh KILN_BINARY
set -uo pipefail
here=$(dirname "$0")
out=$(python3 "$here/opinfo_check.py" --kiln "$1" --ops pow --dtypes f32 --refused /dev/null 2>&1)
rc=$?
if [ $rc -ne 1 ] || ! grep -q "a new refusal" <<<"$out"; then
  echo "gate_check: an unlisted refusal did not fail the check (exit $rc):"; echo "$out" | tail -5; exit 1
fi
out=$(python3 "$here/opinfo_check.py" --kiln "$1" --ops pow --dtypes f32 2>&1)
rc=$?
if [ $rc -ne 0 ]; then echo "gate_check: pow's f32 samples fail against refused.txt (exit $rc):"; echo "$out" | tail -5; exit 1; fi
echo "gate_check: PASS"
