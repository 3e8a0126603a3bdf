// tile-multicast-operands: tma products whose blocks re-read the same A slices (every block of a tile row reads the whole
// of its A: a linear layer's activations, read once per tile column) run in thread-block clusters of kMulticastCluster
// blocks consecutive in n; block r of a cluster copies rows [r, r + 1) * tile_m / cluster of each A slice and multicasts
// them into every block of the cluster (TiledContraction::cluster).
//
// Why: the skinny products an LLM runs are bound by what L2 hands the SMs, and most of that is A re-read. TinyLlama's
// q_proj at 128 tokens (64 x 32 tiles, 2 x 64 blocks, k 2048): per block and 64-deep slice 8 KB of A and 4 KB of B, 48 MB
// through L2 for 8.4 MB of weights and activations, 9.1 us against 8 us at about 6 TB/s; Nsight Compute on the split
// down_proj at 128 tokens: L2 77.5 % busy, DRAM 36 % (bench/results/ncu, 2026-12-02). With clusters of 2 the A traffic
// halves.
//
// Preconditions: tile-tma-copies has run. Postcondition: cluster > 1 on tma products whose n tiles the cluster divides,
// whose A slices split into parts of 8 rows or more (a multiple of the 128-byte swizzle's 8-row period, so each part
// lands 1024-byte aligned), whose copies run 2 or more slices ahead (clusters refill a slot a step after releasing it)
// and whose shared memory holds the extra mbarriers; otherwise the schedule unchanged. Needs a target with clusters
// (sm_90+).
#include "kiln/tile/contraction.h"
#include "kiln/tile/ir.h"
#include "kiln/tile/layout.h"

namespace kiln::tile {

bool multicastOperands(Program& p) {
  if (!p.target.tma) return false;
  bool changed = false;
  for (size_t i = 0; i < p.loop.kernels.size(); ++i) {
    auto* s = std::get_if<TiledContraction>(&p.schedules[i]);
    if (!s || s->a.copy != TiledContraction::Copy::Tma || s->cluster != 1) continue;
    const Contraction c = contractionOf(*s, p.loop.kernels[i]);
    const int64_t cluster = kMulticastCluster;
    if (tilesN(*s, c) % cluster != 0 || s->tileM % (8 * cluster) != 0) continue;
    if (s->pipelineDepth - 1 - s->mmaInFlight < 2) continue;  // a cluster's copies run one slice less ahead
    TiledContraction t = *s;
    t.cluster = cluster;
    if (sharedBytes(t, p.loop.kernels[i]) > p.target.maxSharedPerBlock) continue;  // no room for the empty mbarriers
    *s = t;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::tile
