// tile-specialize-warps: tma products whose blocks are alone on their SMs get a producer warp
// (TiledContraction::producerWarp), one warp after the warpgroups whose first lane issues every slice's copies, while the
// warpgroups only wait for a slot's copies, multiply it and release the slot on an `empty` mbarrier (one arrival per
// consumer warp) that the producer waits on before it refills the slot. One wgmma group stays in flight (mmaInFlight 1).
//
// Why: without it every k step of a tma product has a block barrier (thread 0 may refill the slot of the slice before
// only once every warpgroup is done with it), so the warpgroups march in step, each waits at the barrier for the slowest,
// and with mmaInFlight 0 (rings of 3) the tensor cores drain at every step. The release by mbarrier lets each warpgroup
// run on, keeps a group in flight on a ring of 3, and puts the copies a slice further ahead than tile-overlap-wgmma's
// block-barrier ring (pipelineDepth - 1: a slot is refilled as soon as it is released, not a step later). It is also
// what lets clusters pay (tile-multicast-operands runs after this pass, on products with a producer warp only).
//
// Only for compute-bound products (tile::computeBound) whose blocks are alone on their SMs (tile::aloneOnSm: one wave,
// registers or shared memory for one block) and walk kMinSpecializedSlices or more slices: the ninth warp costs a block
// with two per SM its second (its registers leave room for one block); on blocks alone on their SMs the compute-bound
// products of 32 slices or more measured 3-6 % faster, the short and memory-bound ones up to 21 % slower, and the
// memory-bound ones of 16 or more slices no faster beside eager. (measurements: docs/history.md, "A producer warp")
// The empty mbarriers take 8 bytes a slot; a ring sized to fill a block's shared memory gives up a slot for them.
// Precondition: tile-tma-copies has run. Postcondition: producerWarp and mmaInFlight 1 on every such tma product whose ring
// keeps 3 or more slots, or the schedule unchanged.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {
bool specializeWarps(Program& p, bool everywhere) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->a.copy != TiledContraction::Copy::Tma || s->producerWarp || s->cluster != 1) continue;
    const loop::Kernel& k = p.loop.kernels[i];
    const Contraction c = contractionOf(*s, k);
    const bool pays = aloneOnSm(p.target, *s, k) && computeBound(p.target, *s, c) && ceilDiv(c.k, s->tileK) >= kMinSpecializedSlices;
    if (!pays && !everywhere) continue;
    TiledContraction t = *s;
    t.producerWarp = true;
    t.mmaInFlight = 1;
    while (sharedBytes(t, k) > p.target.maxSharedPerBlock && t.pipelineDepth > 3) --t.pipelineDepth;
    if (t.pipelineDepth < 3 || sharedBytes(t, k) > p.target.maxSharedPerBlock) continue;
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
