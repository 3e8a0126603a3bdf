// tile-overlap-wgmma: wgmma products keep one group of wgmmas in flight across the k loop's barrier
// (TiledContraction::mmaInFlight = 1): per slice every warpgroup issues its wgmmas, commits them and waits only for the
// group of the slice before (wgmma.wait_group 1), so the tensor cores work on slice i while the warps wait for slice
// i + 1's copies, synchronise and issue the next copies.
//
// Why: with wait_group 0 (the lowering's default) each slice's wgmmas must drain before the warps reach the next
// barrier, and the tensor cores idle while the block waits for its copies and issues the next ones: at 128 tokens
// TinyLlama's gate/up product keeps the tensor cores busy about half its time, so that gap is most of the rest.
//
// The price: a ring slot stays read until the slice after it has been issued, so the copies run pipelineDepth - 2
// slices ahead instead of pipelineDepth - 1 (the slot of slice i - 1 is not free when slice i's copies go out). Where
// one more slot fits (the grid is one wave, so a second block per SM is no loss, and the ring stays within one block's
// shared memory and the reduction's slices plus one) the ring grows by one and the look-ahead stays what it was.
// Products whose copies would then run only one slice ahead (a ring of 3 that cannot grow) are left alone.
// Precondition: tile-shape-products has sized the tile and ring. Postcondition: mmaInFlight 1 with pipelineDepth >= 4, or the schedule unchanged.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool overlapWgmma(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Wgmma || s->mmaInFlight != 0) continue;
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t slices = (c.k + s->tileK - 1) / s->tileK;
    int64_t depth = s->pipelineDepth;
    if (gridBlocks(p.schedules[i], p.loop.kernels[i]) <= p.target.smCount && depth + 1 <= slices + 1 &&
        (depth + 1) * ringSlotBytes(*s, c) <= p.target.maxSharedPerBlock)
      ++depth;
    if (depth < 4) continue;  // the copies would run only one slice ahead
    s->pipelineDepth = depth;
    s->mmaInFlight = 1;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
