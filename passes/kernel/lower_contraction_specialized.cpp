// kernel-lower-from-tile for tma products with a producer warp (TiledContraction::producerWarp; see
// passes/tile/specialize_warps.cpp for why). Threads [0, P) are the warpgroups (the consumers), warp P / 32 the producer;
// the roles branch on wg = threadIdx / 128 (Tiling::role), broadcast from lane 0 (defWarpUniform: ptxas serializes wgmmas
// under a branch it takes for divergent).
// Ring slot s has mbarriers full[s] (one arrival a phase: the producer's arrive.expect_tx, whose bytes the copies then
// complete) and empty[s] (one arrival a phase from each consumer warp: the warp is done reading the slot). Slice i is the
// (i / depth)-th use of its slot: its copies complete phase i / depth of full (parity (i / depth) mod 2), and the slice
// before it in the slot, i - depth, was released by phase i / depth - 1 of empty.
//   thread 0: init full[0 .. depth) (1 arrival) and empty[0 .. depth) (P / 32 arrivals), fence them; barrier
//   producer: expect_tx and the copies of slices 0 .. depth - 2
//   for k0 in steps of tile_k (slice i):
//     consumers: wait for full[i mod depth]'s phase; multiply slice i (commit; wait until one group is pending: slice
//       i - 1's wgmmas are done); lane 0 of each warp, if i > 0: arrive on empty[(i - 1) mod depth]
//     producer, if slice j = i + depth - 1 exists: if j >= depth, wait for the release of slice j - depth (= i - 1)
//       from its slot; expect_tx and the copies of slice j into slot j mod depth
//   every thread: wait for every wgmma group (the accumulators are final); the epilogue is the consumers' alone
// The producer warp runs whole (a branch on the lane would put the wgmmas on a path ptxas takes for divergent and it
// would serialize them, C7518): its expect_tx and copies are elected, one lane doing them by a predicate.
// In clusters of C blocks (tile-multicast-operands) the blocks walk their slices alike, and kernel-multicast-operands
// (passes/kernel/multicast_operands.cpp) then has each producer warp copy its block's part of every shared slice into all
// C blocks, each consumer warp release a slot on empty[s] of every block of the cluster, and the cluster meet after the
// barriers' initialisation and at the end.
// With unrollRing (tile-unroll-rings) the loop is marked `unroll ring depth` and kernel-unroll-rings walks it in rounds
// of `depth` steps (passes/kernel/unroll_rings.cpp): step s of round q is slice q * depth + s on slot s, the full waits'
// parity q mod 2, the empty waits' (q + (s + depth - 1) / depth + 1) mod 2.
// Stream-K products (TiledContraction::streamBlocks) walk their cluster's steps across tiles in the loops of
// lower_contraction_stream_k.cpp, the slice i of the steps above being the walk's step, always rolled.
// The two roles share one loop. On the GPU the producer warp runs ahead on its own, held back only by the empty barriers,
// and no block barrier ties the warpgroups together; in the interpreter, which runs threads in lockstep, every wait finds
// the arrivals it needs earlier in program order (the consumers' part of a step comes before the producer's).
#include <fmt/format.h>

#include <optional>

#include "kernel_builder.h"
#include "kiln/support/error.h"
#include "ring.h"

namespace kiln::kernel::detail {

void KernelBuilder::specializedTmaSteps(Tiling& t, const std::vector<OperandSlice>& operands,
                                        const std::function<void(Block&)>& multiply) {
  const int64_t depth = t.s.pipelineDepth, tk = t.s.tileK, K = t.c.k, slices = (K + tk - 1) / tk;
  const int64_t groups = t.s.tileM / kWgmmaM, consumers = groups * kWarpgroupThreads;
  KILN_ASSERT(t.s.mmaInFlight == 1 && depth >= 3, "kernel {}: a producer warp feeds one wgmma group in flight through a ring of 3 or more",
              lk_.name);
  TmaRing r = tmaRing(t, operands, true);
  Block init;
  for (int64_t s = 0; s < depth; ++s) init.push_back(mbarrierInit(r.full, idxConst(s), 1));
  for (int64_t s = 0; s < depth; ++s) init.push_back(mbarrierInit(r.empty, idxConst(s), consumers / Target::kWarpSize));
  init.push_back(fenceProxyAsync());  // the initialised barriers are visible to the copies' completions
  k_.body.push_back(ifLess(threadIdx(), idxConst(1), std::move(init)));
  k_.body.push_back(barrier());
  // Stream-K (TiledContraction::streamBlocks): the loops of streamLoops (lower_contraction_stream_k.cpp) walk the cluster's
  // steps, `walkEnd` of them (at most `steps`), each step's slice and tile from its place in the walk; otherwise one loop
  // walks the tile's slices in a rotated order.
  const bool stream = t.s.streamBlocks > 0;
  std::optional<StreamWalk> walk;
  if (stream) walk = streamWalk(t);
  const int64_t steps = stream ? walk->w.longest : slices;
  const Idx walkEnd = stream ? walk->length : idxConst(slices);
  if (stream) {
    const Idx first = walk->first;
    r.sliceStart = [this, tk, slices, first](const Idx& i) { return simplify(mod(first + i, slices) * idxConst(tk), extents_); };
  } else {
    r.sliceStart = rotatedSlices(t);
  }
  // The copies of the walk's slice j into `slot`; stream-K: after the definitions of its tile (in out's scope).
  auto issue = [&](const Idx& j, const Idx& slot, Block& out) {
    if (stream) defineStreamTile(t, streamUnit(*walk, j, out), out);
    tmaIssue(t, operands, r, j, slot, out);
  };
  KILN_ASSERT(t.role, "kernel {}: a producer warp without the warp role (multiplyOnWarpgroups defines it)", lk_.name);
  const Idx lane = mod(threadIdx(), Target::kWarpSize);
  // wg == groups: the producer warp, whole (its copies are elected: one lane issues them, without a branch on the lane)
  auto producer = [&](Block body) { return ifLess(idxConst(groups - 1), t.role, std::move(body)); };
  Block prologue;
  for (int64_t i = 0; i < depth - 1 && i < steps; ++i) {
    Block copies;
    issue(idxConst(i), idxConst(i), copies);
    if (stream) prologue.push_back(ifLess(idxConst(i), walkEnd, std::move(copies)));  // a scope for the tile's definitions
    else prologue.insert(prologue.end(), copies.begin(), copies.end());
  }
  k_.body.push_back(producer(std::move(prologue)));

  // One k step, slice i: the consumers wait for its slot's phase, multiply it and release the slot of slice i - 1; the
  // producer refills that slot with slice i + depth - 1 once the cluster has released it.
  struct Step {
    Idx slice, slot, parity;
    Idx previous, refillParity;  // the slot slice i - 1 held, which slice i + depth - 1 fills; its empty wait's parity
  };
  auto step = [&](const Step& st, Block& out) {
    Block consume;
    t.ring = st.slot;
    consume.push_back(mbarrierWait(r.full, st.slot, st.parity));
    multiply(consume);
    Block release;
    release.push_back(mbarrierArrive(r.empty, st.previous));
    consume.push_back(ifLess(idxConst(0), st.slice, {ifLess(lane, idxConst(1), std::move(release))}));
    out.push_back(ifLess(t.role, idxConst(groups), std::move(consume)));
    Block refill;
    const Idx j = idxAdd(st.slice, depth - 1);  // the slice copied in this step, into the slot slice i - 1 held
    refill.push_back(ifLess(idxConst(depth - 1), j, {mbarrierWait(r.empty, st.previous, st.refillParity)}));
    issue(j, st.previous, refill);
    out.push_back(producer({ifLess(j, walkEnd, std::move(refill))}));
  };
  // A ring step at slice (walk step) i: its slot, the phase it waits for, the slot it frees and that slot's release phase.
  const Ring ring{depth};
  auto rolledStep = [&](const Idx& slice, Block& out) {
    const Idx j = idxAdd(slice, depth - 1);
    const Idx slot = defVar(out, "slot", ring.slot(slice), depth);
    const Idx previous = defVar(out, "free_slot", ring.slot(j), depth);  // (i - 1) mod depth
    step({slice, slot, ring.parity(slice), previous, ring.parity(j, 1)}, out);
  };
  Block body;
  if (stream) {  // the walk's tiles one after another, each its slices, then the tile's end (streamTileEnd)
    streamLoops(t, *walk, [&](const Idx& i, Block& out) { rolledStep(i, out); });
  } else {  // tile-unroll-rings: kernel-unroll-rings walks this loop in rounds of `depth` steps
    rolledStep(floorDiv(t.k0, tk), body);
    Stmt loop = forLoop(t.k0->var, "k0", idxConst(0), idxConst(K), tk, std::move(body));
    if (t.s.unrollRing) loop.as<op::For>().unrollRing = depth;
    k_.body.push_back(std::move(loop));
  }
  // The accumulators are final. The producer warp waits too (it has no group pending): behind a branch, ptxas would add
  // the wait itself where the roles' paths join.
  k_.body.push_back(wgmmaWait(0));
}

}  // namespace kiln::kernel::detail
