// tile-stream-k-products: compute-bound tma products with a producer warp whose tiles do not fill whole waves of the
// Target's SMs, where tile-shape-products chose it, run as a persistent grid of one wave (TiledContraction::streamBlocks): every cluster
// walks an equal share of the product's (unit, slice) steps, across tile boundaries, and the partial tiles where shares
// meet are added by the block that walked the tile's first slice (a counter per tile; lower_contraction_stream_k.cpp).
//
// Why: a one-wave product sized to the SM count gets small tiles, which take more operand bytes from L2 per MFLOP and
// run slower per SM, and larger tiles leave SMs idle (128 x 256 in clusters of 2 sharing B: 7.6 KB per MFLOP against
// 12 for 128 x 112, but 56 tiles for Qwen2.5-7B q_proj at 512 tokens); a grid of several waves pays for its last,
// partly empty one. Walking steps instead of tiles keeps every SM busy with the larger tiles.
// (measurements: docs/history.md, "Thread-block clusters and multicast" and "Stream-K")
// The price: a partial tile of tile_m x tile_n f32 stored and loaded where a walk starts inside a tile (at most one per
// block, into the program's `stream_k_partials`), a release and a wait per such tile, the epilogue inside the walk's loops.
// Rule: every tma product that tile-shape-products chose to walk stream-K (TiledContraction::streamK: its rule, two
// waves or more of 128 x 256 tiles, not a whole number; or a --product-shapes entry's "stream_k") and that has a producer
// warp, one stage or stacked B slices, no other output axes (batch), blocks alone on their SMs, and tiles that are not a
// whole number of waves. The grid: the Target's SMs in whole clusters. (Tests give `blocks`: every such product then.)
// With under two tiles a walk every tile is shared by several walks, and stream-K measured slower on every such product
// (copies arrive later than in the one-tile-per-block kernel, not understood yet), hence the two-wave bound.
// (measurements: docs/history.md, "Stream-K")
// The program's products share one partials buffer and one counters buffer (they run one after another; each leaves
// its counters zero).
#include <algorithm>

#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool streamKProducts(Program& p, int64_t blocks) {
  bool changed = false;
  for (size_t i = 0; i < p.schedules.size(); ++i) {
    auto* t = std::get_if<TiledContraction>(&p.schedules[i]);
    const loop::Kernel& k = p.loop.kernels[i];
    if (!t || !t->producerWarp || t->streamBlocks > 0 || (blocks == 0 && !t->streamK)) continue;
    const Contraction c = contractionOf(*t, k);
    const int64_t stages = static_cast<int64_t>(k.stages.size()), tiles = tilesM(*t, c) * tilesN(*t, c);
    if (c.outerPoints != 1 || (stages > 1 && !t->stackedB) || tiles % t->cluster != 0) continue;
    const int64_t wave = blocks > 0 ? blocks : p.target.smCount / t->cluster * t->cluster;
    TiledContraction s = *t;
    s.streamBlocks = wave;
    if (wave < t->cluster || wave % t->cluster != 0 || tiles % wave == 0 || streamK(s, c).steps < wave / t->cluster) continue;
    if (blocks == 0 && !aloneOnSm(p.target, *t, k)) continue;  // a wave is one block per SM
    s.partials = programBuffer(p, "stream_k_partials", loop::Buffer::Kind::Temp, DType::F32, wave * t->tileM * t->tileN * stages);
    s.counters = programBuffer(p, "stream_k_counters", loop::Buffer::Kind::Counters, DType::I64, tiles);
    *t = s;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
