// tile-mma-operand-pairs: tensor-core products keep their operand slices in shared memory in the operand type
// (bf16 or f16) instead of f32, laid out [row][k] (k contiguous, padded by 8), and every mma reads its A and B
// registers straight from there as 32-bit pairs (kernel::mmaFromShared). Without it each lane loads its 12 fragment
// elements one by one from f32 slices, converts them and packs them into 6 registers per mma; with it, 6 loads and
// no conversion (rounding happens once, when the slice is stored — to the same values, since tensor-core schedules
// only read operands of their type), and the slices take about 56-75 % of the shared memory (2-byte elements, k
// padded by 8: 75 % at tile_k 16, 56 % at 64). 
// Measured faster on the bf16 products (measurements: docs/history.md, "Tiles and tensor cores (mma.sync)").
#include "kiln/tile/contraction.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool pairMmaOperands(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->instruction != TiledContraction::Instruction::MmaSync || s->a.layout == TiledContraction::SharedLayout::RowPairs)
      continue;
    s->a.layout = s->b.layout = TiledContraction::SharedLayout::RowPairs;
    s->fragments = TiledContraction::Fragments::Pairs;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
