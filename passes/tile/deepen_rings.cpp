// tile-deepen-rings: pipelined wgmma products whose grid is at most one wave (no more blocks than SMs) take the
// deepest cp.async ring that fits one block's shared memory, up to kMaxRingDepth slots, instead of tile::ringDepth's
// at most 4 sized to leave room for a second block per SM.
//
// Why: with one block per SM the second block's half of shared memory is idle, and the ring is what keeps bytes in
// flight. A deeper ring alone measured no faster: the copies' stream is bound by L2 bandwidth (most of it the
// activations re-read by every block), not by latency. With tile-overlap-wgmma, which takes a slot of the look-ahead,
// the deeper ring pays where the tensor cores wait (TinyLlama's o_proj at 128 tokens: 9.6 us with a ring of 4, 8.7 with
// 8). (measurements: docs/history.md, "Warpgroup products on the whole model (2026-12-02)")
// Precondition: tile-shape-products has sized the tile (the grid) and the ring. Postcondition: pipelineDepth never
// smaller than before; within the Target's shared memory per block and the reduction's slices plus one.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool deepenRings(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::Wgmma || s->a.copy != TiledContraction::Copy::CpAsync) continue;
    if (gridBlocks(p.schedules[i], p.loop.kernels[i]) > p.target.smCount) continue;
    const int64_t depth = deepestRing(p.target, *s, contractionOf(*s, p.loop.kernels[i]));
    if (depth <= s->pipelineDepth) continue;
    s->pipelineDepth = depth;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
