// tile-widen-attention-warps: a tensor-core flash-attention warp of 16 query rows has one row group's mma.sync chains,
// exponentials and shuffles to issue between a key step's barriers, and with one or two warps per SM sub-partition
// nothing hides their latencies (Nsight Compute at 512 tokens: one instruction per 3.85 cycles per warp, 4 warps per
// SM). Two row groups per warp (FlashAttention::warpRows 32) give each warp two independent sets of that work, and
// every k and v fragment it loads by ldmatrix feeds both groups' mma.sync (half the shared-memory reads per product).
// The block keeps its warps and holds twice the rows (64 -> 128).
// Rule: bf16/f16 flash attention without a key split whose keys take 8 steps or more (512 keys of 64), blocks of 32
// rows or more (fewer would leave a block of one warp).
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool widenAttentionWarps(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || flashOnCudaCores(*f) || f->warpRows != 16 || f->keySplit != 1 || f->blockQ < 32 || f->pairBlocks) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.attention->key.extent < 8 * f->blockKV) continue;
    f->warpRows = 32;
    f->blockQ = std::min<int64_t>(2 * f->blockQ, 128);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
