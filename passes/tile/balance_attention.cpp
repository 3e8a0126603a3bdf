// tile-balance-attention: under a causal mask, query block qb of a (batch, head) row walks qb + 1 steps of keys, so the
// blocks of a long sequence differ up to QB-fold in work and the GPU waits for its longest blocks (and for the SMs that
// happened to get two of them). Pairing block QB - 1 - b with block b in one thread block (FlashAttention::pairBlocks)
// gives every thread block about QB + 1 steps.
// Rule: flash_attention schedules with an upper key bound (keyTo: causal) and at least 4 query blocks per row.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool balanceAttention(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || f->pairBlocks || !f->keyTo || flashQueryBlocks(*f, p.loop.kernels[i]) < 4) continue;
    f->pairBlocks = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
