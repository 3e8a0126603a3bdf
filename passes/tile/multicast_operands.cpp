// tile-multicast-operands: tma products with a producer warp (tile-specialize-warps) whose blocks re-read the same
// operand slices run in thread-block clusters of kMulticastCluster blocks. A linear layer's activations (A) are read once
// per tile column, its weights (B) once per tile row: where the tiles are wider than high (a B slice is the larger) and
// the tile rows pair up, the cluster's blocks are consecutive in m (one tile column) and block r copies rows
// [r, r + 1) * tile_n / cluster of each B slice into every block of the cluster (TiledContraction::multicastB); otherwise
// they are consecutive in n (one tile row) and share A's slices the same way. Each producer warp refills a slot once
// every consumer warp of the cluster has released it.
//
// Why: the skinny products an LLM runs are bound by what L2 hands the SMs, and much of that is operands re-read. TinyLlama's
// q_proj at 128 tokens (64 x 32 tiles, 2 x 64 blocks, k 2048): per block and 64-deep slice 8 KB of A and 4 KB of B, 48 MB
// through L2 for 8.4 MB of weights and activations. With clusters of 2 the multicast operand's traffic halves. Which
// operand: the larger slice's (B where the tiles are wider than high) measured faster than the other or the same.
// Clusters of 2, not 4: fewer clusters of 4 fit the GPU at once than a one-wave grid has (with 150 KB or more of shared
// memory a block, 66 clusters of 2 run at once on the H200 but only 30 of 4), so a second wave follows.
// Only with a producer warp: without one, thread 0 of each block waited for the other block's releases in the middle of
// its warpgroup's k step, and clusters measured slower everywhere. With the producer warp, which waits on its own, they
// pay (see passes/tile/specialize_warps.cpp). (measurements: docs/history.md, "Thread-block clusters and multicast")
//
// Not for products whose blocks skip tiles by their rows (loop::ReadOnlyAt: a block that skips would leave its cluster
// waiting on its copies and releases).
// Preconditions: tile-specialize-warps has run. Postcondition: cluster > 1 on tma products with a producer warp whose
// tiles along the cluster's axis the cluster divides, whose multicast slices split into parts of 8 rows or more (a
// multiple of the 128-byte swizzle's 8-row period, so each part lands 1024-byte aligned; B multicast: one stage, not
// stacked), whose copies run 2 or more slices ahead and whose shared memory holds the extra mbarriers; otherwise the
// schedule unchanged. Needs a target with clusters (sm_90+).
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool multicastOperands(Program& p) {
  if (!p.target.tma) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->a.copy != TiledContraction::Copy::Tma || !s->producerWarp || s->cluster != 1) continue;
    // An expert product's block may skip its tile (loop::ReadOnlyAt) while the rest of its cluster waits on it.
    if (p.loop.kernels[i].readOnlyAt) continue;
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t cluster = kMulticastCluster;
    if (copiesAhead(*s) < 2) continue;
    const bool aFits = tilesN(*s, c) % cluster == 0 && s->tileM % (8 * cluster) == 0;
    const bool bFits = tilesM(*s, c) % cluster == 0 && s->tileN % (8 * cluster) == 0 && c.stages.size() == 1 && !s->stackedB;
    // The larger slice saves the more: B where its tiles are wider than A's are high (and it can), else A.
    const bool multicastB = bFits && (s->tileN > s->tileM || !aFits);
    if (!aFits && !multicastB) continue;
    TiledContraction t = *s;
    t.cluster = cluster;
    t.multicastB = multicastB;
    if (sharedBytes(t, p.loop.kernels[i]) > p.target.maxSharedPerBlock) continue;  // no room for the empty mbarriers
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
