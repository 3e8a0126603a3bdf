// tile-solo-attention-blocks: under a causal mask query block qb walks qb + 1 steps, and a grid of N blocks on S SMs
// (S < N <= 2S, two blocks to an SM) runs S of them alone at first and pairs the other N - S with blocks of the first S.
// tile-interleave-attention-rows' order pairs each row's heavy blocks with its light ones, but which blocks are left
// alone follows from the order: at 512 tokens of Qwen2.5-7B's 28 heads (8 blocks a row, 224 blocks on 132 SMs) the 40
// alone are of 5 and 1 steps while 20 SMs run 8 + 2 steps. Dealing the 2S - N heaviest blocks an SM each and pairing the
// next heaviest with the lightest (FlashAttention::soloBlocks) leaves every SM at most the heaviest block's steps: 8
// there, and a block that runs alone walks its steps faster than two sharing an SM. A GPU that deals a grid's blocks
// out in turn gives an SM blocks b and b + S.
// Rule: rows-inner flash attention (tile-interleave-attention-rows) whose grid is more than one block per SM of the
// Target and at most two, when two blocks fit an SM's shared memory.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool soloAttentionBlocks(Program& p) {
  bool changed = false;
  const Target& t = p.target;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || !f->rowsInner || f->pairBlocks || f->soloBlocks) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    const int64_t blocks = gridBlocks(*f, k);
    if (blocks <= t.smCount || blocks > 2 * t.smCount || 2 * sharedBytes(*f, k) > t.sharedPerSm) continue;
    f->soloBlocks = 2 * t.smCount - blocks;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
