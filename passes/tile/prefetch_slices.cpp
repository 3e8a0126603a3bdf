// tile-prefetch-slices: tiled matrix products load the next operand slice into registers while the block
// multiplies the current one. Without it, every step of the tiled schedule loads its slices from global memory and
// stores them to shared memory before the barrier, so each thread waits out the full latency of its loads once per
// step with nothing else to do; with it, a step stores the registers loaded during the previous step, synchronises,
// issues the loads of the next slice (operand copy register_prefetch), multiplies while they are in flight,
// and synchronises again. The first slice is loaded before the loop; the loads past the end of k read nothing.
//
// Costs registers: every thread holds its share of the slices, stages x (tile_m + tile_n) x tile_k / threads values;
// a schedule is prefetched only when that is at most kPrefetchRegisters (64), leaving the accumulators, fragments
// and addresses room under the 255 registers a thread may have (the slice depths of tile-deep-k-slices stay within
// it; hand-set or future larger tiles may not). 
// Only products on CUDA cores: on tensor cores it doubled their time (the registers it holds cost the mma.sync kernels
// their occupancy), so they keep plain copies. (measurements: docs/history.md, "Tiles and tensor cores (mma.sync)")
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool prefetchSlices(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Ffma || s->a.copy == TiledContraction::Copy::RegisterPrefetch)
      continue;
    TiledContraction prefetched = *s;
    prefetched.a.copy = prefetched.b.copy = TiledContraction::Copy::RegisterPrefetch;
    if (prefetchRegisters(prefetched, static_cast<int64_t>(p.loop.kernels[i].stages.size())) > kPrefetchRegisters) continue;
    *s = prefetched;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
