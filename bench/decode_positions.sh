#!/usr/bin/env bash
# `kiln run --check` of a decode-step trace at chosen positions over a cache of random values (on the GPU machine):
#   bash bench/decode_positions.sh KILN STEP.pt OUTDIR POSITION...
# The inputs come from `kiln run --save-io` (token, position, then the states); for each position p the position
# input is set to p, the token to 1, and every state larger than 64 bytes (the key and value caches; bf16) is filled with
# seeded normal values, so attention at p reads p + 1 live keys that are not zero. LibTorch runs the trace on the same
# inputs (--check). One line per position; logs under OUTDIR.
set -uo pipefail
kiln=$1 step=$2 out=$3
shift 3
mkdir -p "$out"
rm -rf "$out/base"
"$kiln" run "$step" --save-io "$out/base" > "$out/base.log" 2>&1 || { echo "kiln run --save-io failed"; tail -1 "$out/base.log"; exit 1; }
for p in "$@"; do
  d="$out/inputs-$p"
  rm -rf "$d" && mkdir -p "$d" && cp "$out"/base/input*.bin "$d"/
  python3 - "$d" "$p" <<'PY'
import pathlib, sys
import numpy as np
d, p = pathlib.Path(sys.argv[1]), int(sys.argv[2])
np.array([[1]], np.int64).tofile(d / "input0.bin")
np.array([p], np.int64).tofile(d / "input1.bin")
rng = np.random.default_rng(p)
for f in sorted(d.glob("input*.bin")):
    if f.name in ("input0.bin", "input1.bin") or f.stat().st_size <= 64:
        continue
    values = rng.standard_normal(f.stat().st_size // 2).astype(np.float32)
    (values.view(np.uint32) >> 16).astype(np.uint16).tofile(f)  # bf16: the upper half of each f32
PY
  "$kiln" run "$step" --check --inputs "$d" > "$out/check-$p.log" 2>&1
  echo "position $p: rc=$? $(grep -E 'output 0:|^kiln: check' "$out/check-$p.log" | tr -s ' ' | tr '\n' ' ')"
done
