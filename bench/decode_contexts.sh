#!/usr/bin/env bash
# Decode speed against the live context, two kiln builds side by side in one run (on the GPU machine):
#   bash bench/decode_contexts.sh OLD_KILN NEW_KILN STEP.pt OUTDIR [PROMPT_LENGTHS...]
# For each prompt length n (default 12 500 1000 1984) both builds run `kiln generate STEP.pt --prompt-ids P
# --max-new-tokens 64 --prefill-chunk 128` with the prompt 1 + 7919 i mod 31999 (i < n), the old build first, then the
# new, then both again (the second round is the one tabled: every entry is compiled into the cache by then). Prints a
# table of the first-token time and ms per token that `kiln generate` reports, and whether the two builds' ids agree;
# where they do not, OUTDIR/divergence-N.txt says at which new token and how close each build's pick was
# (bench/ids_divergence.py, from a third run of each with --save-logits).
set -uo pipefail
old=$1 new=$2 step=$3 out=$4
shift 4
lengths=${*:-12 500 1000 1984}
mkdir -p "$out"
prompt() { python3 -c "import sys; n=int(sys.argv[1]); print(','.join(str(1 + 7919 * i % 31999) for i in range(n)))" "$1"; }
field() { grep -oE "$2" "$1" | head -1 | grep -oE '[0-9]+\.[0-9]+' | head -1; }
echo "| prompt tokens | old: first token (ms) | old: ms per token | new: first token (ms) | new: ms per token | same ids |"
echo "|---|---|---|---|---|---|"
for n in $lengths; do
  p=$(prompt "$n")
  for round in 1 2; do
    for which in old new; do
      bin=$old; [ "$which" = new ] && bin=$new
      "$bin" generate "$step" --prompt-ids "$p" --max-new-tokens 64 --prefill-chunk 128 \
        > "$out/$which-$n.ids" 2> "$out/$which-$n-round$round.log"
    done
  done
  same=yes
  if ! cmp -s "$out/old-$n.ids" "$out/new-$n.ids"; then  # where they part: both again with their logits saved
    same=no
    for which in old new; do
      bin=$old; [ "$which" = new ] && bin=$new
      rm -rf "$out/$which-$n-logits"
      "$bin" generate "$step" --prompt-ids "$p" --max-new-tokens 64 --prefill-chunk 128 --save-logits "$out/$which-$n-logits" \
        > /dev/null 2>> "$out/$which-$n-logits.log"
    done
    python3 "$(dirname "$0")/ids_divergence.py" "$out/old-$n.ids" "$out/new-$n.ids" "$n" "$out/old-$n-logits" "$out/new-$n-logits" \
      > "$out/divergence-$n.txt" 2>&1
    rm -rf "$out/old-$n-logits" "$out/new-$n-logits"
  fi
  echo "| $n | $(field "$out/old-$n-round2.log" 'first[^;,]*[0-9]+\.[0-9]+ ms') | $(field "$out/old-$n-round2.log" '[0-9]+\.[0-9]+ ms per token') | $(field "$out/new-$n-round2.log" 'first[^;,]*[0-9]+\.[0-9]+ ms') | $(field "$out/new-$n-round2.log" '[0-9]+\.[0-9]+ ms per token') | $same |"
done
