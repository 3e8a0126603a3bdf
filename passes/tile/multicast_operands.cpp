// tile-multicast-operands: tma products with a producer warp (tile-specialize-warps) whose blocks re-read the same A
// slices (every block of a tile row reads the whole of its A: a linear layer's activations, read once per tile column) run
// in thread-block clusters of kMulticastCluster blocks consecutive in n; block r of a cluster copies rows
// [r, r + 1) * tile_m / cluster of each A slice and multicasts them into every block of the cluster
// (TiledContraction::cluster). Each producer warp refills a slot once every consumer warp of the cluster has released it.
//
// Why: the skinny products an LLM runs are bound by what L2 hands the SMs, and much of that is A re-read. TinyLlama's
// q_proj at 128 tokens (64 x 32 tiles, 2 x 64 blocks, k 2048): per block and 64-deep slice 8 KB of A and 4 KB of B, 48 MB
// through L2 for 8.4 MB of weights and activations; Nsight Compute on the split down_proj at 128 tokens: L2 77.5 % busy,
// DRAM 36 % (bench/results/ncu, 2026-12-02). With clusters of 2 the A traffic halves.
// Only with a producer warp: without one, thread 0 of each block waited for the other block's releases in the middle of
// its warpgroup's k step, and clusters measured slower everywhere on the H200 (2026-12-03, c746357, hot: Qwen2.5-7B
// q_proj at 512 tokens 25.3 -> 37.1 us, gate_proj 134.1 -> 177.0; TinyLlama gate_proj 23.1 -> 24.3). With the producer
// warp, which waits on its own, they pay (see passes/tile/specialize_warps.cpp).
//
// Preconditions: tile-specialize-warps has run. Postcondition: cluster > 1 on tma products with a producer warp whose n
// tiles the cluster divides, whose A slices split into parts of 8 rows or more (a multiple of the 128-byte swizzle's
// 8-row period, so each part lands 1024-byte aligned), whose copies run 2 or more slices ahead and whose shared memory
// holds the extra mbarriers; otherwise the schedule unchanged. Needs a target with clusters (sm_90+).
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
    if (tilesN(*s, c) % cluster != 0 || s->tileM % (8 * cluster) != 0) continue;
    if (copiesAhead(*s) < 2) continue;
    TiledContraction t = *s;
    t.cluster = cluster;
    if (sharedBytes(t, p.loop.kernels[i]) > p.target.maxSharedPerBlock) continue;  // no room for the empty mbarriers
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
