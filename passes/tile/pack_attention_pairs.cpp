// tile-pack-attention-pairs: causal tensor-core flash attention whose query blocks number more than the target's SMs
// but at most twice as many runs as one thread block per SM, each of two groups (FlashAttention::packedPairs, Kernel
// IR Kernel::groups): the heaviest query blocks alone, the others paired heavy with light, so that every SM walks about
// the same number of key steps.
//
// Why: such a grid is one wave of two blocks per SM, and an SM's time is the sum of the key steps of the blocks it
// holds. tile-interleave-attention-rows lists the heavy blocks first and the light ones after, and an SM's second block
// is a light one — but which one is the GPU's choice: on the H200 blocks b and b + 132 share an SM for only 15 of 92
// pairs at 28 heads and 512 tokens, and the worst SM walks 10 key steps where the mean is 7.6. Packed, a thread block's
// two query blocks share its SM by construction and the worst walks 8 (28 heads: 40 alone with 8 or 7 steps, 92 pairs
// of 8 or 7; 32 heads: 9). (measurements: docs/history.md, "The flash schedule and its refinements")
// Rule: unpaired tensor-core flash attention with an upper key bound (keyTo) and 4 or more query blocks per row, N
// query blocks in all with S < N <= 2 S (S = Target::smCount), two blocks' threads and shared memory within one
// thread block's. Runs after tile-interleave-attention-rows, whose order it replaces.
//
// Tried and taken out: the lone blocks splitting their key steps over both groups (the first half handing its maxima,
// sums and outputs to the second through global memory and a counter): measured slower. Two groups walking halves of
// one block's keys share the SM's tensor cores as two query blocks do: the lone block was not waiting on latency its
// idle group could hide. (measurements: docs/history.md, "The flash schedule and its refinements")
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool packAttentionPairs(Program& p) {
  bool changed = false;
  const int64_t sms = p.target.smCount;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    const loop::Kernel& k = p.loop.kernels[i];
    if (!f || flashOnCudaCores(*f) || f->pairBlocks || f->packedPairs > 0 || !f->keyTo || flashQueryBlocks(*f, k) < 4) continue;
    const int64_t items = flashQueryBlocksInAll(*f, k);
    const int64_t shared = ceilDiv(sharedBytes(*f, k), Target::kTmaSharedAlignment) * Target::kTmaSharedAlignment;  // as Kernel::groupSharedBytes
    if (items <= sms || items > 2 * sms || 2 * threadsPerBlock(*f) > p.target.maxThreadsPerBlock ||
        2 * shared > p.target.maxSharedPerBlock)
      continue;
    f->rowsInner = false;
    f->packedPairs = sms;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
