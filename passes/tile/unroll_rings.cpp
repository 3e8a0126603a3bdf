// tile-unroll-rings: products with a producer warp (tile-specialize-warps) walk their k loop in rounds of pipelineDepth
// steps (TiledContraction::unrollRing): step s of a round multiplies ring slot s, so the slot, the full and empty
// mbarriers' parities (one per round) and the wgmma descriptors (a constant offset from the ring's start) are no longer
// computed from k in every step; the last round's steps past the reduction are skipped by a uniform guard.
//
// Why: Nsight Compute's stall samples on Qwen2.5-7B q_proj at 512 tokens with the producer warp in clusters (H200,
// 2026-12-03, ee65c88; bench/results/ncu/2026-12-03-q-proj-s512-ee65c88-stalls.txt): about 43 % of them on the
// uniform-datapath chain that derives each step's slot (`slice mod 7` by a multiply and shifts), parity and descriptors
// before its first wgmma, with two warps per scheduler to hide it; the tensor pipe 55 % busy.
// Off by default: not yet run on the GPU (the interpreter and nvcc check it: tests/unit/warpgroup_products_test.cpp).
// The price: the loop body is pipelineDepth times longer (up to 8 steps of a few wgmmas each).
// Precondition: tile-specialize-warps has run. Postcondition: unrollRing on every product with a producer warp.
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool unrollRings(Program& p) {
  bool changed = false;
  for (Schedule& s : p.schedules) {
    auto* t = std::get_if<TiledContraction>(&s);
    if (!t || !t->producerWarp || t->unrollRing) continue;
    t->unrollRing = true;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
