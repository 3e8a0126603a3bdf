// tile-tile-long-reductions: a matrix product that tile-tiled-contractions left one thread per output (too few
// 16 x 16 tiles for a wave of blocks) and that reduces over kTiledContractionLongReduction (512) or more gets
// 16 x 16 tiles anyway. One thread per output runs the whole reduction alone, the threads of a warp reading
// different weight rows: about 10x slower per flop than 16 x 16 tiles at similar sizes on the H200. Products that
// tile-cooperative-reduce gave a block per output row keep it, as do matrix-vector products (m or n below 16).
// (measurements: docs/history.md, "Tiles and tensor cores (mma.sync)")
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool tileLongReductions(Program& p) {
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    if (!std::holds_alternative<PointwiseMap>(p.schedules[i])) continue;
    auto c = findContraction(p.loop.kernels[i]);
    if (!c || c->k < kTiledContractionLongReduction || c->m < 16 || c->n < 16) continue;
    p.schedules[i] = tiledSchedule(*c, 16);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
