// tile-widen-attention-warps (off by default): tensor-core flash attention of 64-row blocks in 16-row warps becomes
// 128-row blocks of four warps of 32 rows each (FlashAttention::warpRows 32: two row groups per warp, every k and v
// fragment a warp loads feeding both groups' mma.sync), where each head still has two or more such blocks.
//
// Why: a block's key walk is a chain of dependent steps, and at 16 rows a warp a step's mma.sync form one chain per
// warp; with one 16-row warp of each of two blocks per scheduler the tensor pipe stays about half busy on Qwen2.5-7B's
// heads at 512 tokens (pipeline.md). Two row groups per warp give each warp two independent chains, the layout published
// FlashAttention-2 kernels use at head dim 128 (blocks of 128 rows, one block an SM). The price: half the blocks (at 512
// tokens of 28 heads, 112 blocks on 132 SMs, each alone), q's fragments loaded again every step at head dims above 64,
// and no scores a step ahead (the second set of accumulators does not fit: tile::flashAccumulators).
// Measured earlier as 64-row blocks of two such warps (6528785): slower, TinyLlama's heads at 512 tokens 15.6 against
// 13.1 us, Qwen2.5-7B's 22.9 against 19.4. This pass tries the 128-row layout; it is off until measured faster.
// Rule: tensor cores, blocks of 64 rows in 16-row warps, no key split, unpaired, at least 256 queries; three ring slots
// where the keys take three steps or more and they fit a block's shared memory.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool widenAttentionWarps(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || flashOnCudaCores(*f) || f->blockQ != 64 || f->warpRows != 16 || f->keySplit != 1 || f->pairBlocks) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.parallel[static_cast<size_t>(f->queryAxis)].extent < 256) continue;
    FlashAttention w = *f;
    w.blockQ = 128;
    w.warpRows = 32;
    if (sharedBytes(w, k) > p.target.maxSharedPerBlock) continue;
    // Alone on its SM, a block has the shared memory for a third ring slot (two steps of copies in flight).
    FlashAttention deeper = w;
    deeper.ring = 3;
    if (k.attention->key.extent > 2 * w.blockKV && sharedBytes(deeper, k) <= p.target.maxSharedPerBlock) w = deeper;
    *f = w;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
