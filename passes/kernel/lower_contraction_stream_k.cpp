// kernel-lower-from-tile for stream-K products (TiledContraction::streamBlocks; passes/tile/stream_k_products.cpp says
// why). The producer-warp ring of lower_contraction_specialized.cpp walks the cluster's steps instead of one tile's
// slices: step i of the walk is step `first + i` of the product, its unit (first + i) div S and its slice (first + i)
// mod S (S slices a tile), the unit's tile (unit, rank in the cluster) defined where a step's copies or its end use it.
// Units go m fastest (walks side by side, at nearly the same slice, read the same B: the weights, once from L2), but in
// clusters sharing B, which go n fastest (the cluster's tiles already share B; neighbours then share A).
// The ring's slots and phases count the walk's steps, across tiles, as they counted a tile's slices.
//   at the start: walk r = G - 1 - (blockIdx / C), first = floor(r I / G), steps = floor((r + 1) I / G) - first
//   for each unit u the walk reaches (first / S .. (first + steps - 1) / S), its slices [from, to) (from = first mod S in
//   the walk's first unit, 0 after; to = its last step's slice + 1 in the last unit, S before):
//     for each slice: the ring step of walk step i = u S + slice - first (lower_contraction_specialized.cpp's)
//     every warp waits for its wgmma groups (behind the roles' branch ptxas would serialize the wgmmas)
//     consumers:
//     the walk started inside the tile (from > 0): store the accumulators as the block's partial tile (slot r C + rank
//       of buffer `partials`, [slot][accumulator / 4][consumer thread][4]: 16-byte stores, each thread its own vectors);
//       named barrier of the consumers; thread 0 adds one to the tile's counter (release)
//     the walk has the tile's first slice (from = 0):
//       it ends before the tile's last slice (to < S): thread 0 waits until the tile's counter holds the number of the tile's
//         other walks (r + 1 .. the walk of its last slice, owner(u S + S - 1) = floor(((u + 1) S G - 1) / I)) and sets
//         it back to zero (acquire); named barrier; every thread adds the partials of those walks, in their order
//       the epilogue (contractionEpilogue) for the tile
//   a unit's first slice's first wgmma has scale-d 0 (D = A·B): no instruction but the wgmmas writes the accumulators in
//   the loop, or ptxas would serialize the wgmmas (C7514)
// A walk stores at most one partial (its first tile's), so a tile per block of partials suffices. The tile's other walks
// have lower block indices, which start first on the GPU and run first in the interpreter (whose counterAwait checks the
// count is complete when reached). Accumulator c of the thread is the same output in every block (the same tile shape),
// so partials are read back by the thread of the same place that stored them.
#include <fmt/format.h>

#include <algorithm>

#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

namespace {
constexpr int kStreamBarrier = 1;  // the named barrier of the consumer warpgroups (0 is the block's)
}  // namespace

KernelBuilder::StreamWalk KernelBuilder::streamWalk(const Tiling& t) {
  StreamWalk walk;
  walk.w = tile::streamK(t.s, t.c);
  const int64_t C = t.s.cluster, G = walk.w.clusters, I = walk.w.steps;
  KILN_ASSERT(G >= 1 && I >= G && k_.grid[0] == G * C, "kernel {}: a stream-K grid of {} blocks for {} clusters of {} walking {} steps",
              lk_.name, k_.grid[0], G, C, I);
  const Idx cluster = defVar(k_.body, "cluster", floorDiv(blockIdx(), C), G);  // signed, unlike blockIdx
  walk.order = defVar(k_.body, "walk", idxConst(G - 1) + idxMul(cluster, -1), G);
  walk.first = defVar(k_.body, "walk_first", floorDiv(walk.order * idxConst(I), G), I);
  walk.length = defVar(k_.body, "walk_steps", floorDiv(idxAdd(walk.order, 1) * idxConst(I), G) + idxMul(walk.first, -1),
                       walk.w.longest + 1);
  return walk;
}

Idx KernelBuilder::streamUnit(const StreamWalk& walk, const Idx& i, Block& out) {
  return defVar(out, "unit", floorDiv(walk.first + i, walk.w.slices), walk.w.units);
}

void KernelBuilder::defineStreamTile(const Tiling& t, const Idx& unit, Block& out) {
  const int64_t C = t.s.cluster, tilesM = tile::tilesM(t.s, t.c), tilesN = tile::tilesN(t.s, t.c);
  const Idx rank = mod(blockIdx(), C);
  Idx tm, tn;
  if (t.s.multicastB) {  // the cluster's tiles share a column: C consecutive rows of tiles; units n fastest (sharing A)
    tn = mod(unit, tilesN);
    tm = idxConst(C) * floorDiv(unit, tilesN) + rank;
  } else {  // C consecutive tiles of a row (tiles_n a multiple of C); units m fastest, so that walks side by side share B
    tm = mod(unit, tilesM);
    tn = floorDiv(unit, tilesM) * idxConst(C) + rank;
  }
  out.push_back(defIdx(t.tileM->var, "tm", simplify(tm, extents_)));
  out.push_back(defIdx(t.tileN->var, "tn", simplify(tn, extents_)));
}

void KernelBuilder::streamLoops(Tiling& t, const StreamWalk& walk, const std::function<void(const Idx&, Block&)>& step) {
  const tile::StreamK& w = walk.w;
  const int64_t S = w.slices, U = w.units, groups = t.s.tileM / kWgmmaM;
  const Idx last = idxAdd(walk.first + walk.length, -1);  // the walk's last step
  const Idx firstUnit = defVar(k_.body, "unit_first", floorDiv(walk.first, S), U);
  const Idx unitEnd = defVar(k_.body, "unit_end", idxAdd(floorDiv(last, S), 1), U + 1);
  const Idx lastSlice = defVar(k_.body, "last_slice", mod(last, S), S);
  const int uVar = freshKernelVar(), sVar = freshKernelVar();
  const Idx u = idxVar(uVar, "u"), ks = idxVar(sVar, "ks");
  extents_[uVar] = U;
  extents_[sVar] = S;
  Block unit;
  // 1 in the walk's first (last) unit, 0 in the others: 1 - ceil((u - first unit) / U), 1 - ceil((unit end - 1 - u) / U).
  const Idx isFirst = idxConst(1) + idxMul(floorDiv(u + idxMul(firstUnit, -1) + idxConst(U - 1), U), -1);
  const Idx isLast = idxConst(1) + idxMul(floorDiv(unitEnd + idxMul(u, -1) + idxConst(U - 2), U), -1);
  const Idx from = defVar(unit, "from_slice", isFirst * mod(walk.first, S), S);
  const Idx to = defVar(unit, "to_slice", idxConst(S) + idxMul(isLast * (idxConst(S - 1) + idxMul(lastSlice, -1)), -1), S + 1);
  Block slice;
  Block ring;  // under 0 <= step < longest (always: the verifier learns the step's bounds from it, as the builder knows them)
  const Idx i = defVar(slice, "step", u * idxConst(S) + ks + idxMul(walk.first, -1), w.longest);
  t.accumulate = simplify(ks + idxMul(from, -1), extents_);  // zero at the unit's first slice: D = A·B (read by `step`)
  step(i, ring);
  t.accumulate = nullptr;
  slice.push_back(ifLess(idxConst(-1), i, {ifLess(i, idxConst(w.longest), std::move(ring))}));
  unit.push_back(forLoop(sVar, "ks", from, to, 1, std::move(slice)));
  // Every wgmma group waited for by every warp (the producer has none pending): behind the roles' branch, ptxas would
  // serialize the wgmmas (C7514), as in the rolled loop's end (lower_contraction_specialized.cpp).
  unit.push_back(wgmmaWait(0));
  Block end;
  streamTileEnd(t, walk, u, from, to, end);
  unit.push_back(ifLess(t.role, idxConst(groups), std::move(end)));
  k_.body.push_back(forLoop(uVar, "u", firstUnit, unitEnd, 1, std::move(unit)));
}

void KernelBuilder::streamTileEnd(const Tiling& t, const StreamWalk& walk, const Idx& unit, const Idx& from, const Idx& to,
                                  Block& out) {
  const tile::StreamK& w = walk.w;
  const int64_t C = t.s.cluster, G = w.clusters, I = w.steps, S = w.slices;
  const int64_t consumers = t.s.tileM / kWgmmaM * kWarpgroupThreads;
  Block body;  // under unit < units (always: the verifier learns the tile's bounds from it)
  defineStreamTile(t, unit, body);
  std::vector<int> accs;  // the thread's accumulators in one order
  for (const Owned& o : t.owned) accs.insert(accs.end(), o.acc.begin(), o.acc.end());
  KILN_ASSERT(accs.size() % 4 == 0, "kernel {}: {} accumulators a thread (stream-K hands them over 4 at a time)", lk_.name, accs.size());
  const int64_t vectors = static_cast<int64_t>(accs.size()) / 4;
  const int partials = param(t.s.partials, true), counters = param(t.s.counters, true);
  const Idx rank = mod(blockIdx(), C);
  const Idx thread = t.role * idxConst(kWarpgroupThreads) + mod(threadIdx(), kWarpgroupThreads);  // below `consumers` here
  const Idx tileIndex = simplify(unit * idxConst(C) + rank, extents_);
  auto at = [&](const Idx& walkOrder, int64_t v) {  // vector v of the thread in the partial tile of walk `walkOrder`
    const Idx slot = walkOrder * idxConst(C) + rank;
    return simplify(((slot * idxConst(vectors) + idxConst(v)) * idxConst(consumers) + thread) * idxConst(4), extents_);
  };
  // The walk started inside the tile: its partial, handed over.
  Block hand;
  for (int64_t v = 0; v < vectors; ++v) {
    std::vector<FE> values;
    for (int e = 0; e < 4; ++e) values.push_back(fvar(accs[static_cast<size_t>(4 * v + e)]));
    hand.push_back(kernel::storeVector(partials, at(walk.order, v), std::move(values)));
  }
  hand.push_back(namedBarrier(kStreamBarrier, consumers));
  hand.push_back(ifLess(threadIdx(), idxConst(1), {counterRelease(counters, tileIndex)}));
  body.push_back(ifLess(idxConst(0), from, std::move(hand)));
  // The walk has the tile's first slice: the other walks' partials (if it ends before the tile does), then the epilogue.
  Block finish, others;
  const Idx more = defVar(others, "other_walks",
                          floorDiv(idxAdd(idxAdd(unit, 1) * idxConst(S * G), -1), I) + idxMul(walk.order, -1), w.pieces);
  others.push_back(ifLess(threadIdx(), idxConst(1), {counterAwait(counters, tileIndex, more)}));
  others.push_back(namedBarrier(kStreamBarrier, consumers));
  const int pVar = freshKernelVar();
  const Idx p = idxVar(pVar, "p");
  extents_[pVar] = w.pieces;
  Block add, inside;
  const Idx source = defVar(add, "source", walk.order + p, G + w.pieces);
  addHandedTile(partials, [&](int64_t v) { return at(source, v); }, accs, inside);
  add.push_back(ifLess(source, idxConst(G), std::move(inside)));  // always (the count names walks that exist)
  others.push_back(forLoop(pVar, "p", idxConst(1), idxAdd(more, 1), 1, std::move(add)));
  finish.push_back(ifLess(to, idxConst(S), std::move(others)));
  finish.insert(finish.end(), t.epilogue.begin(), t.epilogue.end());
  body.push_back(ifLess(from, idxConst(1), std::move(finish)));
  out.push_back(ifLess(unit, idxConst(w.units), std::move(body)));
}

}  // namespace kiln::kernel::detail
