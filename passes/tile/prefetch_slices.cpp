// tile-prefetch-slices: tiled matrix products load the next operand slice into registers while the block
// multiplies the current one. Without it, every step of the tiled schedule loads its slices from global memory and
// stores them to shared memory before the barrier, so each thread waits out the full latency of its loads once per
// step with nothing else to do; with it, a step stores the registers loaded during the previous step, synchronises,
// issues the loads of the next slice (kernel-lower-from-tile's knob prefetch), multiplies while they are in flight,
// and synchronises again. The first slice is loaded before the loop; the loads past the end of k read nothing.
//
// Costs registers: every thread holds its share of the slices, stages x (tile_m + tile_n) x tile_k / threads values;
// a schedule is prefetched only when that is at most kPrefetchRegisters (64), leaving the accumulators, fragments
// and addresses room under the 255 registers a thread may have (the slice depths of tile-deep-k-slices stay within
// it; hand-set or future larger tiles may not). Off by default until its kernels have run on a GPU.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool prefetchSlices(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    Schedule& s = p.schedules[i];
    if (s.strategy != Strategy::TiledContraction || s.knobs.count("prefetch")) continue;
    const int64_t tm = s.knob("tile_m"), tn = s.knob("tile_n"), tk = s.knob("tile_k");
    const int64_t threads = scheduledTensorCoreType(s) ? 128 : (tm / s.knob("micro_m")) * (tn / s.knob("micro_n"));
    const int64_t stages = static_cast<int64_t>(p.loop.kernels[i].stages.size());
    // as the lowering allocates them: per operand slice, ceil(rows * tile_k / threads) registers
    const int64_t perThread = stages * ((tm * tk + threads - 1) / threads + (tn * tk + threads - 1) / threads);
    if (perThread > kPrefetchRegisters) continue;
    s.knobs["prefetch"] = 1;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
