// tile-lower-from-loop: gives every kernel the default schedule, a pointwise map of one point per thread in
// 256-thread blocks (fewer for small kernels, rounded up to whole warps); reductions run serially per thread.
// Attention kernels (loop-fuse-attention) get their one schedule, flash_attention (tensor cores for bf16/f16, CUDA cores
// for f32), with the key bounds their masks give and the largest block of 64, 32 or 16 query rows that still makes a
// quarter of a block per SM of the Target (16 when none does; f32: one paired block per SM): blocks of 16 measured
// faster at 32 tokens, blocks of 64 at 128. The key split (keySplit) stays 1: with warps
// sharing rows each warp rescales its whole output for a share of the keys, which measured slower.
// (measurements: docs/history.md, "The flash schedule and its refinements")
#include <algorithm>

#include "kiln/loop/attention.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

Program lowerFromLoop(const loop::Program& p, const Target& target) {
  Program t{p, {}, target};
  for (const loop::Kernel& k : p.kernels) {
    if (auto o = loop::flashAttentionOperands(p, k)) {
      FlashAttention f;
      f.queryAxis = o->queryAxis;
      f.mmaType = o->type;
      const int64_t queries = k.parallel[static_cast<size_t>(o->queryAxis)].extent, others = k.rowPoints() / queries;
      // f32 on CUDA cores: a thread's work per step is the same at every block size (8 threads per row), so the larger
      // blocks only save copies of k and v, and only while there are still two blocks per SM (one once paired).
      const int64_t perSm = flashOnCudaCores(f) ? 2 * target.smCount : target.smCount;
      const int64_t quarter = flashOnCudaCores(f) ? 1 : 4;
      f.blockQ = 16;
      for (int64_t rows : {64, 32})
        if (others * ((queries + rows - 1) / rows) * quarter >= perSm) {
          f.blockQ = rows;
          break;
        }
      loop::KeyBounds b = loop::keyBounds(k, o->queryAxis);
      f.keyFrom = b.from;
      f.keyTo = b.to;
      f.ring = 2;
      // f32 slices are twice as large: steps of 32 keys where 64 would not fit a block's shared memory (head dims 256).
      if (flashOnCudaCores(f) && sharedBytes(f, k) > target.maxSharedPerBlock) f.blockKV = 32;
      // Three ring slots (two steps of copies in flight) when blocks walk three steps or more and two blocks still fit
      // an SM's shared memory.
      f.ring = 3;
      if (k.attention->key.extent <= 2 * f.blockKV || 2 * sharedBytes(f, k) > target.sharedPerSm) f.ring = 2;
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
