#!/usr/bin/env bash
# One entry point for the GPU machine's device calls: `scripts/device.sh TASK [ARGS]` runs the named task with ARGS;
# `scripts/device.sh --help` lists the tasks, `scripts/device.sh --help TASK` prints that task's full header (its
# environment knobs: the same names the task always took, e.g. PRODUCTS_DTYPE, NCU_CASES, KILN_SANITIZE).
# Each task still lives in its own scripts/device_<task>.sh (first step of issue 41 item 7: the names are settled
# here, so recipes can move to this spelling before the task files themselves are merged and renamed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# task name -> script (tasks that differ only by defaults keep one script and a knob)
declare -A TASKS=(
  [build]=device_build.sh [check]=device_check.sh [runtime]=device_runtime.sh [llama]=device_llama.sh
  [products]=device_products.sh [probe]=device_probe_products.sh [sweep]=device_shape_sweep.sh
  [attention]=device_attention.sh [attention-rows]=device_attention_rows.sh [memory-bound]=device_memory_bound.sh
  [families]=device_families.sh [ncu]=device_ncu.sh [sass]=device_sass.sh [remeasure]=device_remeasure.sh
  [decode]=device_decode.sh [passes-ab]=device_passes_ab.sh [moe]=device_moe.sh [bisect-python]=device_bisect_python.sh
)
ORDER=(build check runtime llama products probe sweep attention attention-rows memory-bound families ncu sass remeasure decode
       passes-ab moe bisect-python)
summary() {  # the first sentence of a task script's header
  sed -n '2,4{s/^# \{0,1\}//;p}' "$HERE/$1" | tr '\n' ' ' | sed 's/\. .*/./' | cut -c1-110
}
usage() {
  echo "usage: scripts/device.sh TASK [ARGS]     (scripts/device.sh --help TASK: the task's knobs)"
  echo "tasks:"
  for t in "${ORDER[@]}"; do printf '  %-15s %s\n' "$t" "$(summary "${TASKS[$t]}")"; done
}
case "${1:-}" in
  ""|-h|--help|help)
    if [ -n "${2:-}" ]; then
      [ -n "${TASKS[$2]:-}" ] || { echo "device.sh: no task '$2' (scripts/device.sh --help lists them)" >&2; exit 2; }
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$HERE/${TASKS[$2]}"
    else
      usage
    fi
    exit 0 ;;
esac
task=$1; shift
[ -n "${TASKS[$task]:-}" ] || { echo "device.sh: no task '$task' (scripts/device.sh --help lists them)" >&2; exit 2; }
exec bash "$HERE/${TASKS[$task]}" "$@"
