// tile-interleave-attention-rows: under a causal mask query block qb walks qb + 1 steps, and a grid that lists each row's
// blocks together (heaviest first) leaves it to chance which blocks share an SM: at 512 tokens of 32 heads (8 blocks a
// row, 256 blocks on 132 SMs, two at a time) an SM can get 8 + 4 steps while the mean is 4.4 + 4.4. Listing every row's
// heaviest blocks first and then the lightest (FlashAttention::rowsInner) gives every SM's second block from the light
// half (the first SMs blocks land on distinct SMs). Which light block joins which heavy one is the GPU's choice, not b
// and b + SMs (bench/probes/block_placement.cu: 15 of 92 such pairs share an SM on the H200); where the grid is one to
// two blocks an SM, tile-pack-attention-pairs, which runs after this pass, replaces the order with pairs it places.
// Rule: unpaired flash attention with an upper key bound (keyTo: causal) and at least 4 query blocks per row.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool interleaveAttentionRows(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || f->pairBlocks || f->rowsInner || !f->keyTo || flashQueryBlocks(*f, p.loop.kernels[i]) < 4) continue;
    f->rowsInner = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
