// tile-unroll-rings: products with a producer warp (tile-specialize-warps) walk their k loop in rounds of pipelineDepth
// steps (TiledContraction::unrollRing): step s of a round multiplies ring slot s, so the slot, the full and empty
// mbarriers' parities (one per round) and the wgmma descriptors (a constant offset from the ring's start) are no longer
// computed from k in every step; the last round's steps past the reduction are skipped by a uniform guard.
//
// Why: computed from k, each step's slot (`slice mod 7` by a multiply and shifts), parity and descriptors form a
// dependent uniform-datapath chain before its first wgmma, with two warps per scheduler to hide it: about 43 % of the
// stall samples on Qwen2.5-7B q_proj at 512 tokens with the producer warp in clusters. Unrolled, that chain is gone
// and the s512 products with a producer warp ran faster. (measurements: docs/history.md, "Rounds of the ring")
// The price: the loop body is pipelineDepth times longer (up to 8 steps of a few wgmmas each).
// Precondition: tile-specialize-warps has run. Postcondition: unrollRing on every product with a producer warp.
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool unrollRings(Program& p) {
  bool changed = false;
  for (Schedule& s : p.schedules) {
    auto* t = std::get_if<TiledContraction>(&s);
    if (!t || !t->producerWarp || t->unrollRing || t->streamBlocks > 0) continue;  // stream-K walks its own loops
    t->unrollRing = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
