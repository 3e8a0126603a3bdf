// tile-group-tiles (off by default: --enable-pass tile-group-tiles): products whose tiles span several tile rows and
// many tile columns walk them in groups of groupM tile rows, m fastest within a group (TiledContraction::groupM).
//
// Why: blocks are dealt to the SMs in index order, a wave at a time. With n fastest, a wave of the Target's SMs covers
// one tile row (or two) by as many tile columns: every B slice (the weights of an nn.Linear) it reads is read by one
// block, and A's row by all of them. Grouped, the same wave covers groupM tile rows by SMs / groupM columns, so each B
// slice is read by groupM blocks of the wave, from L2 after the first: the wave's distinct bytes from memory fall by
// about groupM for B at the cost of groupM distinct A row slices. A candidate for products whose B dominates their
// traffic (Qwen2.5-7B's MLP at 512 tokens: 4 x 148 tiles of 128 x 128); not yet measured on the GPU, so off by default.
// Precondition: the tile is sized (tile-shape-products) and the block order is not another pass's: no clusters, no
// stream-K. Postcondition: groupM > 1 (a divisor of the tile rows) on every such product of more than one wave of
// tiles (the order of one wave's blocks, all resident at once, hardly matters); the verifier's rule.
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool groupTiles(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!t || t->groupM > 1 || t->cluster > 1 || t->streamBlocks > 0) continue;
    const Contraction c = contractionOf(*t, p.loop.kernels[i]);
    const int64_t rows = tilesM(*t, c), columns = tilesN(*t, c);
    if (rows * columns * c.outerPoints <= p.target.smCount) continue;  // one wave: every block is resident at once
    // The largest group of 8, 4 or 2 tile rows that divides them, while a wave still spans two groups' columns.
    for (int64_t g : {8, 4, 2}) {
      if (rows % g != 0 || columns < 2 || p.target.smCount / g < 2) continue;
      t->groupM = g;
      changed = true;
      break;
    }
  }
  return changed;
}

}  // namespace kiln::tile
