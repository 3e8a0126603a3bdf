// tile-attention-scores-by-wgmma: on the H200 a tensor-core flash-attention warp spends a step's issue slots on
// block_kv / 8 mma.sync and block_kv / 16 ldmatrix.x4 of k per 16 of depth for S = q · kᵀ alone (at 128 keys and depth
// 64: 64 mma.sync and 32 ldmatrix per warp and step), each mma.sync a dependent link in the warp's chain. One warpgroup's
// wgmma.mma_async m64n{block_kv}k16 per 16 of depth computes the same scores for all four warps from shared memory (q
// and k stored there in rows of 64 depths under the 128-byte swizzle, which wgmma reads without ldmatrix or bank
// conflicts), and leaves each thread the same
// accumulators mma.sync did (kernel::wgmmaElement is the mma C layout per warp), so the softmax and P·V are unchanged.
// Rule: sm_90a, tensor-core attention of one warpgroup (block_q 64 in 16-row warps, no key split), depth a multiple of 64.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool attentionScoresByWgmma(Program& p) {
  if (!p.target.wgmma) return false;
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || f->scoresByWgmma || !flashOneWarpgroup(*f)) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    if (k.attention->dot.axes[0].extent % 64 != 0) continue;
    f->scoresByWgmma = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
