// tile-attention-scores-ahead: a tensor-core flash-attention step is a chain: S = q · kᵀ by mma.sync, the row maxima
// through shuffles, the exponentials, P·V. With one or two warps per SM sub-partition (the suite's 512-token kernels)
// little else hides it: the tensor cores idle while the softmax runs and the ALUs while S is multiplied. Multiplying
// the next step's scores first, into a second set of accumulators, and then running this step's softmax and P·V on
// the scores the step before multiplied (FlashAttention::scoresAhead) lets one warp's exponentials issue while its own
// mma.sync work, one step apart. The same shared memory: k's copies run two steps ahead and v's one.
// With the scores by wgmma (tile-attention-scores-by-wgmma) the next step's wgmma group is issued before this step's
// softmax and waited for after its P·V: the warpgroup's tensor cores multiply it while the warps run the softmax.
// Rule: tensor-core flash attention without a key split, with two ring slots and keys of at least two steps, while the
// second set of score accumulators keeps the thread within its registers.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool attentionScoresAhead(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || flashOnCudaCores(*f) || f->scoresAhead || f->keySplit != 1 || f->ring != 2) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.attention->key.extent <= f->blockKV) continue;  // one step: nothing to multiply ahead
    // Accumulators per thread with the second set of scores kept at 192, so that addresses and the softmax's
    // temporaries fit in the 255 a thread may hold.
    FlashAttention ahead = *f;
    ahead.scoresAhead = true;
    if (flashAccumulators(ahead, k.attention->dot.axes[0].extent, k.parallel[static_cast<size_t>(k.rowAxes)].extent) > 192) continue;
    *f = ahead;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
