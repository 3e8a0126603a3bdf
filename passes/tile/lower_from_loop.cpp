// tile-lower-from-loop: gives every kernel the default schedule, a pointwise map of one point per thread in
// 256-thread blocks (fewer for small kernels, rounded up to whole warps); reductions run serially per thread.
#include "kiln/tile/ir.h"

namespace kiln::tile {

Program lowerFromLoop(const loop::Program& p, const Target& target) {
  Program t{p, {}, target};
  for (const loop::Kernel& k : p.kernels) {
    int64_t points = k.parallelPoints();
    int64_t block = std::min<int64_t>(256, (points + 31) / 32 * 32);
    t.schedules.push_back(PointwiseMap{block, 1});
  }
  return t;
}

}  // namespace kiln::tile
