// tile-deepen-rings: pipelined wgmma products whose grid is at most one wave (no more blocks than SMs) take the
// deepest cp.async ring that fits one block's shared memory, up to kMaxRingDepth slots, instead of tile::ringDepth's
// at most 4 sized to leave room for a second block per SM.
//
// Why: with one block per SM the second block's half of shared memory is idle, and the ring is what keeps bytes in
// flight. Measured on the H200 (2026-12-02, bench/product_probe.py at f3c9e61's parent, TinyLlama bf16 at 128 tokens):
// the gate/up product streaming its operands with no wgmma at all (variant nomma) still took 19.2 us of its 26.0, for
// 106 MB through L2 in 118 blocks, about 47 GB/s per SM with 84 KB (3 slices) in flight per block: the stream waits on
// latency, not bandwidth. A ring of 8 keeps 7 slices (196 KB for that product) in flight.
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
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t slices = (c.k + s->tileK - 1) / s->tileK, slot = ringSlotBytes(*s, c);
    int64_t depth = s->pipelineDepth;
    while (depth < kMaxRingDepth && depth + 1 <= slices + 1 && (depth + 1) * slot <= p.target.maxSharedPerBlock) ++depth;
    if (depth == s->pipelineDepth) continue;
    s->pipelineDepth = depth;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
