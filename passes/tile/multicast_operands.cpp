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
// through L2 for 8.4 MB of weights and activations; Nsight Compute on the split down_proj at 128 tokens: L2 77.5 % busy,
// DRAM 36 % (bench/results/ncu, 2026-12-02). With clusters of 2 the multicast operand's traffic halves. Which operand:
// TinyLlama's q_proj at 512 tokens (64 x 128 tiles, 8 KB of A and 16 KB of B a slice) took 11.5 us with A multicast and
// 10.8 with B, o_proj 11.4 / 10.8, o_proj_residual 12.2 / 11.2; gate_proj (128 x 176) and Qwen2.5-7B's down_proj
// (128 x 224) the same either way (H200, 2026-12-03, hot). Clusters of 4 blocks (A multicast) were 50 % slower on every
// one-wave product tried (TinyLlama q_proj at 512 tokens 11.4 -> 17.4 us, Qwen2.5-7B q_proj 23.8 -> 38.2): fewer clusters of
// 4 fit the GPU at once than the grid's 32, and a second wave follows (bench/probes/cluster_occupancy.cu on the H200: with
// 150 KB or more of shared memory a block, 66 clusters of 2 run at once but only 30 of 4, 120 blocks, and 15 of 8).
// Only with a producer warp: without one, thread 0 of each block waited for the other block's releases in the middle of
// its warpgroup's k step, and clusters measured slower everywhere on the H200 (2026-12-03, c746357, hot: Qwen2.5-7B
// q_proj at 512 tokens 25.3 -> 37.1 us, gate_proj 134.1 -> 177.0; TinyLlama gate_proj 23.1 -> 24.3). With the producer
// warp, which waits on its own, they pay (see passes/tile/specialize_warps.cpp).
//
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
