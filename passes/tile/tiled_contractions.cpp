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
// (matrix-vector products, e.g. one token of decoding), keep theirs too. A product read only at each row's own matrix
// (loop::ReadOnlyAt, loop-batch-expert-products) is always tiled, along the row axis its group reads.
#include <optional>

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

namespace {

// A product read only at its rows' own matrix (loop::ReadOnlyAt: a mixture of experts' products, one per expert) is
// tiled whatever its block count: the tiles are what lets a block skip the rows of other experts, and without them
// every point of every expert's product would be computed. Its m axis is the row axis the group reads.
bool tileByRows(Program& p, size_t i) {
  const loop::Kernel& k = p.loop.kernels[i];
  const int row = k.readOnlyAt->rowAxis;
  std::optional<Contraction> c;
  for (size_t d = 1; d < k.parallel.size() && !c; ++d)
    if (static_cast<int>(d) != row) c = findContraction(k, row, static_cast<int>(d));
  if (!c || c->mAxis != row || c->nAxis == 0) return false;
  int64_t tile = 16;
  for (int64_t t : {64, 32})
    if (c->m >= t && c->n >= t) {
      tile = t;
      break;
    }
  p.schedules[i] = tiledSchedule(*c, tile);
  return true;
}

}  // namespace

bool tileContractions(Program& p, int64_t minTiles) {
  if (minTiles == 0) minTiles = p.target.smCount;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    if (p.loop.kernels[i].readOnlyAt) {
      changed |= tileByRows(p, i);
      continue;
    }
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
