// tile-share-kv-heads: a decoder step's attention with grouped-query heads (TinyLlama's 32 query heads over 4 KV heads)
// has one query row per head, so its flash grid is a block per query head, each copying its KV head's keys and values
// for itself: every KV head's keys and values are read once per query head sharing them (8 times), and each block's
// 16-row tiles hold one real row. Taking the heads as the query axis, a block of the G query heads that share a KV head
// (FlashAttention::blockRows) reads those keys and values once and fills G rows of its tiles.
// Rule: flash schedules whose query axis has extent 1 (one token), without compile-time key bounds, pairing, packing or
// wgmma, with another row axis that q reads and whose largest run of rows sharing k and v (loop::sharedAcrossRows: a
// divisor of its extent up to block_q; Qwen2.5-7B's 7 query heads per KV head, TinyLlama's 8) is 2 or more: that axis
// becomes the query axis, in blocks of that run.
// Before tile-split-attention-keys, which then splits the fewer, fuller blocks' keys.
#include <algorithm>

#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool shareKvHeads(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    const loop::Kernel& k = p.loop.kernels[i];
    if (!f || f->blockRows > 0 || f->keyFrom || f->keyTo || f->pairBlocks || f->packedPairs > 0 || f->scoresByWgmma ||
        f->valuesByWgmma || k.parallel[static_cast<size_t>(f->queryAxis)].extent != 1)
      continue;
    const auto ops = loop::flashAttentionOperands(p.loop, k);
    if (!ops) continue;
    for (int axis = 0; axis < k.rowAxes; ++axis) {
      if (axis == f->queryAxis || !loop::usesVar(*ops->q, k.parallel[static_cast<size_t>(axis)].var)) continue;
      const int64_t extent = k.parallel[static_cast<size_t>(axis)].extent;
      int64_t rows = std::min(f->blockQ, extent);
      while (rows >= 2 && (extent % rows != 0 || !loop::sharedAcrossRows(p.loop, k, axis, rows))) --rows;
      if (rows < 2) continue;
      f->queryAxis = axis;
      f->blockRows = rows;
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace kiln::tile
