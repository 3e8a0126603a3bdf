// tile-specialize-warps: tma products outside clusters get a producer warp (TiledContraction::producerWarp), one warp
// after the warpgroups whose first lane issues every slice's copies, while the warpgroups only wait for a slot's copies,
// multiply it and release the slot on an `empty` mbarrier (one arrival per consumer warp) that the producer waits on
// before it refills the slot. One wgmma group stays in flight (mmaInFlight 1).
//
// Why: without it every k step of a tma product has a block barrier (thread 0 may refill the slot of the slice before
// only once every warpgroup is done with it), so the warpgroups march in step, each waits at the barrier for the slowest,
// and with mmaInFlight 0 (rings of 3: the products of more than one wave) the tensor cores drain at every step. The
// release by mbarrier lets each warpgroup run on, keeps a group in flight on a ring of 3, and puts the copies a slice
// further ahead than tile-overlap-wgmma's block-barrier ring (pipelineDepth - 1: a slot is refilled as soon as it is
// released, not a step later).
// The empty mbarriers take 8 bytes a slot; a ring sized to fill a block's shared memory gives up a slot for them.
// Clustered products (tile-multicast-operands) keep their own cross-block empty barriers and are left alone.
// Precondition: tile-tma-copies (and tile-multicast-operands) have run. Postcondition: producerWarp and mmaInFlight 1 on
// every tma product outside clusters whose ring keeps 3 or more slots, or the schedule unchanged.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool specializeWarps(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->a.copy != TiledContraction::Copy::Tma || s->producerWarp) continue;
    TiledContraction t = *s;
    t.producerWarp = true;
    t.mmaInFlight = 1;
    const loop::Kernel& k = p.loop.kernels[i];
    while (sharedBytes(t, k) > p.target.maxSharedPerBlock && t.pipelineDepth > 3) --t.pipelineDepth;
    if (t.pipelineDepth < 3 || sharedBytes(t, k) > p.target.maxSharedPerBlock) continue;
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
