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
// slices ahead instead of pipelineDepth - 1 (the slot of slice i - 1 is not free when slice i's copies go out).
// Products whose copies would then run only one slice ahead (a ring of 3: TinyLlama's lm_head at 128 tokens, 250
// blocks, took 58.3 us so against 51.6) are left alone.
// (measurements: docs/history.md, "Warpgroup products on the whole model (2026-12-02)")
// Precondition: tile-deepen-rings has run. Postcondition: mmaInFlight 1 with pipelineDepth >= 4, or the schedule unchanged.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool overlapWgmma(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Wgmma || s->mmaInFlight != 0) continue;
    if (s->pipelineDepth < 4) continue;  // the copies would run only one slice ahead
    s->mmaInFlight = 1;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
