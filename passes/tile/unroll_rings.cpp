// tile-unroll-rings: products with a producer warp (tile-specialize-warps) walk their k loop in rounds of pipelineDepth
// steps (TiledContraction::unrollRing): step s of a round multiplies ring slot s, so the slot, the full and empty
// mbarriers' parities (one per round) and the wgmma descriptors (a constant offset from the ring's start) are no longer
// computed from k in every step; the last round's steps past the reduction are skipped by a uniform guard.
//
// Why: Nsight Compute's stall samples on Qwen2.5-7B q_proj at 512 tokens with the producer warp in clusters (H200,
// 2026-12-03, ee65c88; bench/results/ncu/2026-12-03-q-proj-s512-ee65c88-stalls.txt): about 43 % of them on the
// uniform-datapath chain that derives each step's slot (`slice mod 7` by a multiply and shifts), parity and descriptors
// before its first wgmma, with two warps per scheduler to hide it; the tensor pipe 55 % busy.
// Measured on the H200 (2026-12-03, 02f1205, bench/kiln_variants.py, hot µs without -> with): Qwen2.5-7B q_proj at
// 512 tokens 25.7 -> 23.9, o_proj 25.6 -> 23.6, o_proj_residual 27.0 -> 25.4; TinyLlama down_proj 23.5 -> 22.3,
// silu_mul_down 28.1 -> 27.4; the other s512 products within 1 % (bench/results/2026-12-03-h200-unroll-rings-02f1205.txt).
// The stalls then: ~29 % of the samples waiting for a slot's copies, ~18 % for the wgmmas in flight.
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
