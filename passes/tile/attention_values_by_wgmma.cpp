// tile-attention-values-by-wgmma: on the H200 a tensor-core flash-attention warp of 16 rows spends a step's P·V on
// width / 16 ldmatrix.x4.trans of v and width / 8 mma.sync per 16 keys (at width 128 and 64 keys: 32 ldmatrix and 64
// mma.sync per warp and step), and every warp of the block reads all of v's slice from shared memory. One warpgroup's
// wgmma.mma_async m64n{width}k16 per 16 keys takes A from registers — p's packed pairs, which are the mma A fragment per
// warp as they stand — and v from shared memory as core matrices (wgmma's transposed B), once for the four warps, into
// the output accumulators mma.sync used (the wgmma accumulator layout is the mma C layout per warp). v is stored in rows
// of 64 columns under the 128-byte swizzle: without it (8 x 8 core matrices), wgmma's reads of a transposed B conflict
// in shared memory's banks, and the step ran 30 % slower than by mma.sync on the H200 (18ce6e8).
// Rule: sm_90a, tensor-core attention of one warpgroup (block_q 64 in 16-row warps, no key split), output rows of 128 to
// 256 values (wgmma's largest n), a multiple of 64 (the swizzle's row). Rows of 64 (TinyLlama's heads) measured no faster
// (8eb54b0: 9.5 against 9.5 µs at 512 tokens, 3.1 against 2.9 at 128); the schedule and the verifier take them.
#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool attentionValuesByWgmma(Program& p) {
  if (!p.target.wgmma) return false;
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || f->valuesByWgmma || !flashOneWarpgroup(*f)) continue;
    const auto ops = loop::flashAttentionOperands(p.loop, p.loop.kernels[i]);
    if (!ops || ops->width % 64 != 0 || ops->width < 128 || ops->width > 256) continue;
    f->valuesByWgmma = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
