#!/usr/bin/env bash
# On the GPU machine, in one device call: the transformers families at their real layer shapes (issue 9 item 3).
# Builds kiln; meanwhile one Python process exports each family of models/hf_families.py --real (2 layers at the
# shapes of one public checkpoint, 32000-token vocabulary, 128 tokens, traced on the GPU in the dtype) for each dtype
# of FAMILY_DTYPES (default "bf16 f32"), at most 3 files ahead of the checks. Then:
#   1. `kiln run --check` on the fixtures no earlier device call ran (FAMILY_FIXTURES; "" for none), with memcheck on the first;
#   2. `kiln run MODEL.pt --check --bench 20` on each exported model, in order, while the call's time
#      (BENCH_LIMIT_SECONDS, default 470) lasts; each .pt and its cache entry are deleted after its run. The exported
#      models named in FAMILY_MEMCHECK (e.g. "bf16_gpt2") also run under compute-sanitizer memcheck (at most 150 s).
# $OUT gets families.txt (the table, printed last) and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${FAMILY_DTYPES:=bf16 f32}"
: "${FAMILY_LIST:=gpt2 gpt_neox phi phi3 stablelm falcon qwen2 qwen3 mistral gemma gemma2}"
: "${FAMILY_FIXTURES=attention_bf16_long hf_gpt_neox_tiny_bf16 hf_gemma2_tiny_bf16 mlp_bf16_wide}"
: "${BENCH_LIMIT_SECONDS:=470}"
: "${FAMILY_MEMCHECK:=}"
LOG=$(mktemp -d)
mkdir -p "$LOG/pt"
# The exporter: one process (transformers imported once), files written as NAME.pt then NAME.done.
FAMILY_DTYPES=$FAMILY_DTYPES FAMILY_LIST=$FAMILY_LIST PT_DIR=$LOG/pt nohup python3 - > "$LOG/export.log" 2>&1 <<'EOF' &
import os, pathlib, sys, time
sys.path.insert(0, "models")
import hf_families
out = pathlib.Path(os.environ["PT_DIR"])
for dtype in os.environ["FAMILY_DTYPES"].split():
    for family in os.environ["FAMILY_LIST"].split():
        while len(list(out.glob("*.pt"))) >= 3:  # the checks delete each file after its run
            time.sleep(1)
        t = time.time()
        try:
            hf_families.main_real([family, "--dtype", dtype, "--device", os.environ.get("FAMILY_DEVICE", "cuda"), "-o", str(out / f"{dtype}_{family}.pt")])
        except BaseException as e:  # noqa: BLE001 - reported in the table, the next one still runs
            print(f"{dtype}_{family}: export failed: {e!r}", flush=True)
            (out / f"{dtype}_{family}.failed").touch()
            continue
        print(f"{dtype}_{family}: exported in {time.time() - t:.1f} s", flush=True)
        (out / f"{dtype}_{family}.done").touch()
EOF
exporter=$!
source bench/device_setup.sh
export KILN_CACHE_DIR=$LOG/cache
rows=()
row() { rows+=("$(printf '%-22s %-6s %-10s %-8s %-9s %-9s %s' "$@")"); echo "${rows[-1]}" | tee -a "$OUT/rows.txt"; }  # rows.txt: kept if the call is cut short
relerr() { grep -oE 'kiln rel_l2 [0-9.e+-]*|f32\[[0-9x]*\] rel_l2 [0-9.e+-]*' "$1" | awk '{print $NF}' | sort -g | tail -1; }  # worst output
kernels() { grep -o 'ran [^ ]* ([0-9]* kernels' "$1" | grep -o '[0-9]* kernels' | awk '{print $1}' | head -1; }
row model check rel_l2 kernels "run s" "ms/fwd" notes
first=1
for m in $FAMILY_FIXTURES; do
  ./build/kiln run "models/fixtures/$m.pt" --check --bench 20 > "$LOG/check-$m.log" 2>&1; rc=$?
  note=""
  if [ $first = 1 ]; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "models/fixtures/$m.pt" > "$LOG/memcheck-$m.log" 2>&1
    note="memcheck rc=$?"; first=0
  fi
  row "$m" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$(relerr "$LOG/check-$m.log")" \
    "$(kernels "$LOG/check-$m.log")" - \
    "$(grep -o '[0-9.]* ms per forward (CUDA events' "$LOG/check-$m.log" | awk '{print $1}' | head -1)" "$note"
done
for dtype in $FAMILY_DTYPES; do
  for family in $FAMILY_LIST; do
    name=${dtype}_$family
    while [ ! -e "$LOG/pt/$name.done" ] && [ ! -e "$LOG/pt/$name.failed" ] && kill -0 "$exporter" 2>/dev/null; do sleep 1; done
    if [ ! -e "$LOG/pt/$name.done" ]; then row "$name" EXPORT - - - - "$(grep "^$name" "$LOG/export.log" | tail -1 | cut -c1-120)"; continue; fi
    if [ $((SECONDS - start)) -gt $((LIMIT - 45)) ]; then row "$name" "-" - - - - "not run: the call's time is spent"; rm -f "$LOG/pt/$name.pt"; continue; fi
    t0=$SECONDS
    ./build/kiln run "$LOG/pt/$name.pt" --check --bench 20 > "$LOG/check-$name.log" 2>&1; rc=$?
    note=""
    if [[ " $FAMILY_MEMCHECK " == *" $name "* ]]; then
      timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 ./build/kiln run "$LOG/pt/$name.pt" > "$LOG/memcheck-$name.log" 2>&1
      note="memcheck rc=$? "
    fi
    row "$name" "$([ $rc = 0 ] && echo PASS || echo "FAIL")" \
      "$(relerr "$LOG/check-$name.log")" \
      "$(kernels "$LOG/check-$name.log")" \
      "$((SECONDS - t0))" "$(grep -o '[0-9.]* ms per forward (CUDA events' "$LOG/check-$name.log" | awk '{print $1}' | head -1)" \
      "$note$([ $rc = 0 ] || grep -m1 -E 'kiln:|error|FAIL' "$LOG/check-$name.log" | cut -c1-140)"
    rm -rf "$LOG/pt/$name.pt" "$KILN_CACHE_DIR"
  done
done
kill "$exporter" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$LOG" --exclude cache --exclude pt . 2>/dev/null
{ printf '%s\n' "${rows[@]}"; echo "total $((SECONDS - start)) s"; } | tee "$OUT/families.txt"
