// tile-last-block-sums (off by default): a split product (tile-shape-products: S blocks per output tile, each a part of
// the reduction, into f32 partials, then a kernel adding them and applying the epilogue) becomes one kernel: each block
// stores its partial, takes a ticket at its tile's counter (kernel::blockTicket), and the last of the tile's S blocks to
// arrive adds the S partials and applies the epilogue for that tile (TiledContraction::lastBlockSums), so the adding
// kernel is not launched.
// The sums are the adding kernel's, in its order ((p0 + p1) + p2 ...): the results are the same bits.
//
// Why: the adding kernel costs a launch and a wait for the partial kernel's last block (a programmatic launch hides part
// of it), about 1 us whatever its bytes in the fit of tile-shape-products' streaming model (kStreamingSplitMicros), where
// the products it follows take 3 to 13 us; the partials it reads are in L2 either way.
// The price: one i64 counter per output tile (a buffer of kind counters, zero from the model's load on; the last ticket
// of each launch sets it back to zero), an acq_rel atomic per block between two block barriers, and the last block of
// each tile reading the tile's partials alone.
// Measured on the H200 (2026-12-04, ten split bf16 rows of the suite, hot µs with against without; bench/results/
// 2026-12-04-h200-last-block-sums-variants-*.json): slower on all ten, so off by default. With a fence.sc.gpu in every
// thread (0c4bd25): TinyLlama k_proj at 32 tokens 4.4 against 2.9, down_proj at 128 12.7 against 10.5, Qwen2.5-7B
// k_proj at 128 6.8 against 4.6, down_proj at 512 117.5 against 112.8. With one acq_rel atomic (8288ec9): 3.9 against
// 2.9, 12.5 against 10.3, 6.4 against 4.6, 115.8 against 113.0; q_proj at 128 12.0 against 11.2. What limits it: the
// adding kernel spreads the partials' reads over every SM (hundreds of blocks, a programmatic launch waiting for the
// product), while here one block per tile reads all S partials of its tile alone (TinyLlama's down_proj at 128 tokens:
// 32 blocks reading 128 KB each at what one SM takes from L2), after the atomic's round trip. Spreading the adding over
// the tile's S blocks needs them to wait for each other (a grid-wide dependency), which is what a stream-K schedule
// would build on these tickets.
// Rule: every wgmma product split this way (tile::addsPartialsOf) whose next kernel is the adding pointwise map (with
// everyInstruction, as the tests ask, also mma.sync and CUDA-core products: the lowering is the same).
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool lastBlockSums(Program& p, bool everyInstruction) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!t || t->lastBlockSums || !addsPartialsOf(p, i)) continue;
    if (t->instruction != TiledContraction::Instruction::Wgmma && !everyInstruction) continue;
    loop::Buffer counters;
    counters.kind = loop::Buffer::Kind::Counters;
    counters.name = p.loop.kernels[i].name + "_tickets";
    counters.dtype = DType::I64;
    counters.shape = {splitParts(*t, p.loop.kernels[i]).tilesPerPart};
    t->lastBlockSums = true;
    t->counters = static_cast<int>(p.loop.buffers.size());
    p.loop.buffers.push_back(counters);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
