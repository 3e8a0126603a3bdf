#!/usr/bin/env bash
# Compares the CUDA kiln emits now (the working tree, built into build/) with what BASE_COMMIT emits, for every
# fixture in models/fixtures and the TinyLlama-shaped transformers trace (models/hf_llama.py --preset tinyllama) at
# 1x128 in bf16 and f32. A refactor of a level above CUDA must leave this output byte-identical.
#
#   scripts/compare_emitted.sh BASE_COMMIT            # all of it (the TinyLlama traces take a few minutes once)
#   KILN_COMPARE_TINYLLAMA=0 scripts/compare_emitted.sh BASE_COMMIT   # fixtures only
#   KILN_COMPARE_MODELS="DIR/*.pt" scripts/compare_emitted.sh BASE_COMMIT  # and these models too
#
# The fixtures and TinyLlama at 128 tokens do not reach every lowering: the producer-warp, multicast, unrolled-ring and
# stream-K products and the wgmma and packed attention kernels appear only at model sizes. For a change to those,
# add the suite's Qwen2.5-7B cases (`python3 bench/export_cases.py DIR --filter qwen2.5-7b`: 84 traces, about 5 GB
# of random weights, 1 minute) with KILN_COMPARE_MODELS (tests/passes/tile/*.tir say which case reaches which pass).
#
# The base is checked out as a git worktree and built once per commit under $KILN_COMPARE_DIR (default
# ../.kiln-compare, beside the checkout, so ccache shares objects between the two builds); the TinyLlama traces are
# written there once and reused. Each model's emitted source (`kiln compile M --ir cuda`) is diffed; a model that
# fails to compile must fail with the same message in both. Exit 0 when everything matches, 1 otherwise (the diffs
# are under $KILN_COMPARE_DIR/diff-<base>-<checkout>/).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/compare_emitted.sh BASE_COMMIT" >&2; exit 2; }
ROOT=$(pwd)
TAG=$(basename "$ROOT")  # several checkouts may compare at once: their logs and diffs apart
BASE=$(git rev-parse --short=12 "$1^{commit}") || { echo "compare_emitted: no commit $1" >&2; exit 2; }
WORK=${KILN_COMPARE_DIR:-$(cd .. && pwd)/.kiln-compare}
mkdir -p "$WORK"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}

# The base build: one per commit, shared by concurrent callers (flock).
BASE_TREE=$WORK/base-$BASE
(
  flock 9
  if [ ! -x "$BASE_TREE/build/kiln" ]; then
    [ -d "$BASE_TREE" ] || git worktree add --detach "$BASE_TREE" "$BASE" >/dev/null 2>&1
    echo "compare_emitted: building the base $BASE in $BASE_TREE" >&2
    KILN_TARGET=kiln bash "$BASE_TREE/scripts/build.sh" > "$WORK/build-$BASE.log" 2>&1 ||
      { tail -20 "$WORK/build-$BASE.log"; exit 1; }
  fi
) 9> "$WORK/base-$BASE.lock"
echo "compare_emitted: building the working tree" >&2
KILN_TARGET=kiln bash scripts/build.sh > "$WORK/build-$TAG.log" 2>&1 || { tail -20 "$WORK/build-$TAG.log"; exit 1; }

models=(models/fixtures/*.pt)
if [ "${KILN_COMPARE_TINYLLAMA:-1}" = 1 ]; then
  for dt in bf16 f32; do
    pt=$WORK/tinyllama_$dt.pt
    (
      flock 9
      [ -f "$pt" ] || python3 models/hf_llama.py --preset tinyllama --dtype $dt --batch 1 --seq 128 --no-check \
        -o "$pt" > "$WORK/tinyllama_$dt.log" 2>&1 || { tail -5 "$WORK/tinyllama_$dt.log"; exit 1; }
    ) 9> "$pt.lock"
    models+=("$pt")
  done
fi

# shellcheck disable=SC2206  # the list is globbed on purpose
[ -n "${KILN_COMPARE_MODELS:-}" ] && models+=(${KILN_COMPARE_MODELS})

DIFFS=$WORK/diff-$BASE-$TAG
rm -rf "$DIFFS" && mkdir -p "$DIFFS"
same=0 differ=0
emit() {  # emit KILN MODEL OUT: the CUDA source, or the error and exit code
  local rc=0
  KILN_CACHE_DIR=$WORK/cache-$TAG KILN_PROGRESS=0 "$1" compile "$2" --ir cuda > "$3" 2> "$3.err" || rc=$?
  [ $rc -eq 0 ] || { echo "exit $rc" >> "$3"; cat "$3.err" >> "$3"; }
  rm -f "$3.err"
}
for m in "${models[@]}"; do
  name=$(basename "$m" .pt)
  emit "$BASE_TREE/build/kiln" "$m" "$DIFFS/$name.base.cu"
  emit "$ROOT/build/kiln" "$m" "$DIFFS/$name.head.cu"
  if cmp -s "$DIFFS/$name.base.cu" "$DIFFS/$name.head.cu"; then
    same=$((same + 1)); rm -f "$DIFFS/$name.base.cu" "$DIFFS/$name.head.cu"
  else
    differ=$((differ + 1))
    diff -u "$DIFFS/$name.base.cu" "$DIFFS/$name.head.cu" > "$DIFFS/$name.diff" || true
    echo "DIFFERS  $name  ($(grep -c '^[-+][^-+]' "$DIFFS/$name.diff") lines; $DIFFS/$name.diff)"
  fi
done
echo "compare_emitted: base $BASE: $same identical, $differ different"
[ $differ -eq 0 ]
