// tile-tiled-contractions: gives matrix products (tile/contraction.h) the tiled schedule. One block of 256
// threads (16 x 16) computes a tile_m x tile_n tile of the output for one point of the other axes; each thread
// holds a micro_m x micro_n register tile of accumulators (rows ty + i*16, columns tx + j*16). The reduction
// runs in steps of tile_k: the block stages each operand's tile_m x tile_k and tile_n x tile_k slices in
// shared memory (consecutive threads read consecutive k), synchronises, and every thread reads its rows and
// columns from shared memory: each operand element fetched from global memory serves tile_n (or tile_m)
// products instead of one.
//
// The tile is the largest of 64, 32, 16 that still gives at least `minTiles` blocks (default
// kTiledContractionMinTiles: one wave on the H200's 132 SMs). With fewer than that even at 16, a product keeps its
// schedule when it is block_per_row (tile-cooperative-reduce's block per output row serves a long reduction with
// few outputs well: 2 TFLOP/s for TinyLlama's k_proj at 32 tokens on the H200) or its reduction is shorter than
// kTiledContractionLongReduction; a thread_per_output product with a long reduction is tiled at 16 regardless,
// because there each thread runs the whole reduction alone, threads of a warp reading different weight rows
// (0.2-0.5 TFLOP/s measured for TinyLlama's k_proj at 128 tokens and Qwen2.5-7B's at 32, against 2-6 TFLOP/s for
// 16 x 16 tiles at similar sizes: bench/results/2026-11-30-h200-tiled.md). Reductions shorter than 8, and
// products with m or n below 16 (matrix-vector products, e.g. one token of decoding), are never tiled.
#include <algorithm>

#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"

namespace kiln::tile {

bool tileContractions(Program& p, int64_t minTiles) {
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
    bool alone = p.schedules[i].strategy == Strategy::ThreadPerOutput && c->k >= kTiledContractionLongReduction;
    if (tile == 0 && alone) tile = 16;
    if (tile == 0) continue;
    p.schedules[i] = Schedule{Strategy::TiledContraction,
                              {{"tile_m", tile}, {"tile_n", tile}, {"tile_k", 16}, {"micro_m", tile / 16},
                               {"micro_n", tile / 16}, {"m_axis", c->mAxis}, {"n_axis", c->nAxis}}};
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
