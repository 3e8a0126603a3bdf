// tile-lower-from-loop: gives every kernel the default schedule, a pointwise map of one point per thread in
// 256-thread blocks (fewer for small kernels, rounded up to whole warps); reductions run serially per thread.
// Attention kernels (loop-fuse-attention) get their one schedule, flash_attention, with the key bounds their masks give.
#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

Program lowerFromLoop(const loop::Program& p, const Target& target) {
  Program t{p, {}, target};
  for (const loop::Kernel& k : p.kernels) {
    if (auto o = loop::tensorCoreAttention(p, k)) {
      FlashAttention f;
      f.queryAxis = o->queryAxis;
      f.mmaType = o->type;
      loop::KeyBounds b = loop::keyBounds(k, o->queryAxis);
      f.keyFrom = b.from;
      f.keyTo = b.to;
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
