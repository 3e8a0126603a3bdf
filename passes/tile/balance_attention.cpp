// tile-balance-attention: under a causal mask, query block qb of a (batch, head) row walks qb + 1 steps of keys, so the
// blocks of a long sequence differ up to QB-fold in work and the GPU waits for its longest blocks (and for the SMs that
// happened to get two of them). Pairing block QB - 1 - b with block b in one thread block (FlashAttention::pairBlocks)
// gives every thread block about QB + 1 steps, at the price of half the blocks (one per SM where the grid was two).
// Rule: flash_attention schedules with an upper key bound (keyTo: causal) and at least 4 query blocks per row, on CUDA
// cores (f32). On tensor cores a key step is short and bound by latency, and two unpaired blocks sharing an SM hide each
// other's waits better than one paired block walking its steps alone, once tile-interleave-attention-rows deals the
// heavy and light blocks out together (Qwen2.5-7B's heads at 512 tokens: 19.8 us unpaired and interleaved against
// 21.1 paired). (measurements: docs/history.md, "The flash schedule and its refinements")
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool balanceAttention(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    const loop::Kernel& k = p.loop.kernels[i];
    if (!f || f->pairBlocks || !f->keyTo || flashQueryBlocks(*f, k) < 4) continue;
    if (!flashOnCudaCores(*f)) continue;
    f->pairBlocks = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
