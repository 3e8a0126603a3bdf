// tile-tiled-contractions: gives matrix products (tile/contraction.h) the tiled schedule. One block of 256
// threads (16 x 16) computes a tile_m x tile_n tile of the output for one point of the other axes; each thread
// holds a micro_m x micro_n register tile of accumulators (rows ty + i*16, columns tx + j*16). The reduction
// runs in steps of tile_k: the block stages each operand's tile_m x tile_k and tile_n x tile_k slices in
// shared memory (consecutive threads read consecutive k), synchronises, and every thread reads its rows and
// columns from shared memory: each operand element fetched from global memory serves tile_n (or tile_m)
// products instead of one.
//
// The tile is the largest of 64, 32, 16 that still gives at least `minTiles` blocks (default
// one block per SM of the Target: a wave); with fewer than that even at 16, the kernel keeps
// its schedule (but see tile-tile-long-reductions). Reductions shorter than 8, and products with m or n below 16
// (matrix-vector products, e.g. one token of decoding), keep theirs too.
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

TiledContraction tiledSchedule(const Contraction& c, int64_t tile) {
  TiledContraction t;
  t.mAxis = c.mAxis;
  t.nAxis = c.nAxis;
  t.tileM = t.tileN = tile;
  t.tileK = 16;
  t.microM = t.microN = tile / 16;
  return t;
}

bool tileContractions(Program& p, int64_t minTiles) {
  if (minTiles == 0) minTiles = p.target.smCount;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto c = findContraction(p.loop.kernels[i]);
    if (!c || c->k < 8 || c->m < 16 || c->n < 16) continue;  // a matrix-vector product is not worth a tile
    auto tiles = [&](int64_t t) { return c->outerPoints * ((c->m + t - 1) / t) * ((c->n + t - 1) / t); };
    int64_t tile = 0;
    for (int64_t t : {64, 32, 16})
      if (tiles(t) >= minTiles) {
        tile = t;
        break;
      }
    if (tile == 0) continue;
    p.schedules[i] = tiledSchedule(*c, tile);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
