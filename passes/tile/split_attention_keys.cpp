// tile-split-attention-keys (flash-decoding): a decoder step's attention has one query row per head, so its flash grid is
// one block per head (TinyLlama's 32 on a GPU of 132 SMs), and each block walks every live key step alone, one dependent
// step after another: the kernel's time grows with the context while most SMs idle. Splitting each query block's steps
// over several blocks (FlashAttention::keyBlocks), the last to finish merging their partial maxima, sums and outputs,
// fills the GPU and divides the walk.
// Rule: flash schedules of at most kDecodeRows query rows per (batch, head) row and one query block each, or of one
// token's query heads grouped by KV head (tile-share-kv-heads); no pairing or packing; whose query blocks fill at most
// half the Target's SMs. The split is the largest that keeps the grid within one wave (SMs / query blocks), leaves each
// block two of the walk's compile-time steps or more, and stays within kFlashMaxKeyBlocks. Where the keys' limit is
// known only at run time (a decoder step's position), the blocks divide the live steps, so that at a short context
// most of them have nothing to walk. The program's attention kernels share one partials buffer and one counters buffer
// (they run one after another; each leaves its counters zero).
#include <algorithm>

#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
namespace {
constexpr int64_t kDecodeRows = 16;  // query rows per row that count as decoding: a step's tokens, a short chunk
constexpr int64_t kStepsPerBlock = 2;  // the fewest compile-time steps a split leaves each block
}  // namespace

bool splitAttentionKeys(Program& p, int64_t sms) {
  const int64_t smCount = sms > 0 ? sms : p.target.smCount;
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* f = std::get_if<FlashAttention>(&p.schedules[i]);
    if (!f || f->keyBlocks > 1 || f->pairBlocks || f->packedPairs > 0) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    const bool oneToken = f->blockRows > 0;  // query heads sharing a KV head (tile-share-kv-heads)
    if (!oneToken && (k.parallel[static_cast<size_t>(f->queryAxis)].extent > kDecodeRows || flashQueryBlocks(*f, k) != 1)) continue;
    const int64_t items = flashQueryBlocksInAll(*f, k), steps = ceilDiv(k.attention->key.extent, f->blockKV);
    const int64_t split = std::min({smCount / items, steps / kStepsPerBlock, kFlashMaxKeyBlocks});
    if (split < 2) continue;
    f->keyBlocks = split;
    f->partials = programBuffer(p, "flash_partials", loop::Buffer::Kind::Temp, DType::F32, flashPartialsElements(*f, k));
    f->counters = programBuffer(p, "flash_counters", loop::Buffer::Kind::Counters, DType::I64, items);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
