// tile-lower-from-loop: gives every kernel the default schedule, a pointwise map of one point per thread in
// 256-thread blocks (fewer for small kernels, rounded up to whole warps); reductions run serially per thread.
// Attention kernels (loop-fuse-attention) get their one schedule, flash_attention, with the key bounds their masks give
// and the largest block of 64, 32 or 16 query rows that still makes two blocks per SM of the Target (16 when none
// does): a block's warps work through its steps one dependent instruction after another, so an SM needs warps of
// several blocks to hide that latency (ncu, H200, TinyLlama's heads at 512 tokens in blocks of 64: 11 % occupancy,
// 5.5 cycles per issued instruction). Blocks that walk many key steps split each step's keys among 2 or 4 warps per 16
// rows (keySplit), so the longest block's chain of steps is that much shorter.
#include <algorithm>

#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

Program lowerFromLoop(const loop::Program& p, const Target& target) {
  Program t{p, {}, target};
  for (const loop::Kernel& k : p.kernels) {
    if (auto o = loop::tensorCoreAttention(p, k)) {
      FlashAttention f;
      f.queryAxis = o->queryAxis;
      const int64_t queries = k.parallel[static_cast<size_t>(o->queryAxis)].extent, others = k.rowPoints() / queries;
      f.blockQ = 16;
      for (int64_t rows : {64, 32})
        if (others * ((queries + rows - 1) / rows) >= 2 * target.smCount) {
          f.blockQ = rows;
          break;
        }
      f.mmaType = o->type;
      loop::KeyBounds b = loop::keyBounds(k, o->queryAxis);
      f.keyFrom = b.from;
      f.keyTo = b.to;
      // The steps of the block that walks the most (the last one under a causal mask): 8 or more get 4 warps per row
      // group, 4 or more 2, within 8 warps a block.
      const int64_t keys = k.attention->key.extent;
      const int64_t hi = std::min(keys, queries - 1 + b.to.value_or(keys)), lo = std::max<int64_t>(0, queries - f.blockQ + b.from.value_or(-keys));
      const int64_t steps = (hi + f.blockKV - 1) / f.blockKV - lo / f.blockKV;
      for (int64_t split : {4, 2})
        if (steps >= 2 * split && f.blockQ / 16 * split <= 8) {
          f.keySplit = split;
          break;
        }
      t.schedules.push_back(f);
      continue;
    }
    int64_t points = k.parallelPoints();
    int64_t block = std::min<int64_t>(256, (points + 31) / 32 * 32);
    t.schedules.push_back(PointwiseMap{block, 1});
  }
  return t;
}

}  // namespace kiln::tile
