// kernel-lower-from-tile for TiledContraction::lastBlockSums (kernel_builder.h): a split product's blocks meet at their
// tile's counter once each has stored its partial, and the last to arrive runs the next kernel (the one adding the
// partials and applying the epilogue) for the tile's outputs.
//
// After the epilogue: blockTicket at counter b mod tilesPerPart (block b takes part b / tilesPerPart of that tile:
// tile::splitParts), then, where the ticket is the last (S - 1), every thread of the block takes V consecutive outputs
// of the tile (V: the adding kernel's vector, where its innermost axis is the product's n; 1 otherwise) in rounds of
// threads x V: first every round's loads of the partials and of whatever else the adding kernel reads in V-wide
// vectors (all in flight at once), then every round's sums, epilogue and vector store. Outputs outside the matrix
// (a tile past m or n) are neither read nor written.
#include "kernel_builder.h"
#include "kiln/support/error.h"

namespace kiln::kernel::detail {

void KernelBuilder::sumPartialsInLastBlock(const Tiling& t) {
  KILN_ASSERT(tail_, "kernel {}: its last blocks add the partials, but no kernel adding them was given", lk_.name);
  const loop::Kernel& sum = tail_->kernel;
  const tile::SplitParts parts = tile::splitParts(t.s, lk_);
  const int ticketVar = freshKernelVar();
  extents_[ticketVar] = parts.parts;
  k_.body.push_back(blockTicket(ticketVar, "ticket", param(t.s.counters, true),
                                simplify(mod(blockIdx(), parts.tilesPerPart), extents_), parts.parts));

  // The adding kernel's vector, where it runs along the product's n (tile_n is a multiple of 8 on wgmma).
  const int64_t vector = tail_->map.vector;
  const bool alongN = !sum.parallel.empty() && sum.parallel.back().var == t.nAxis.var;
  const int64_t V = alongN && t.s.tileN % vector == 0 ? vector : 1;
  const int64_t threads = k_.block[0], points = t.s.tileM * t.s.tileN / V, rounds = (points + threads - 1) / threads;

  // Round r's outputs: a row m and a vector nv of V columns (n = nv V + v), defined in a scope of their own (each
  // round's two parts define them again), as the pointwise lowering defines its vectors (the alignment provable).
  struct Round {
    Idx first;  // the thread's vector in the tile: threadIdx + r * threads (below points)
    std::vector<loop::ExprP> copies;
    Cse cse;
  };
  const int64_t vectorsPerRow = t.s.tileN / V;
  const loop::Axis nv{freshLoopVar(), "nv", (t.c.n + V - 1) / V};
  const Idx mVar = var(t.mAxis), nvVar = var(nv);
  extents_[mVar->var] = tile::tilesM(t.s, t.c) * t.s.tileM;  // what they may take: the guards below keep m < M, n < N
  extents_[nvVar->var] = tile::tilesN(t.s, t.c) * vectorsPerRow;
  auto scoped = [&](Round& r, const std::function<void(Block&)>& fill) {
    Block inside;
    fill(inside);
    Block at;
    at.push_back(defIdx(mVar->var, t.mAxis.name, simplify(t.tileM * idxConst(t.s.tileM) + floorDiv(r.first, vectorsPerRow), extents_)));
    at.push_back(defIdx(nvVar->var, nv.name, simplify(t.tileN * idxConst(vectorsPerRow) + mod(r.first, vectorsPerRow), extents_)));
    at.push_back(guardBelow(mVar, t.c.m, Block{guardBelow(nvVar * idxConst(V), t.c.n, std::move(inside))}));
    return guardBelow(r.first, points, std::move(at));
  };
  std::vector<Round> round(static_cast<size_t>(rounds));
  const Idx n0 = idxVar(nv.var, nv.name) * idxConst(V);  // Loop-IR terms
  Block last;
  for (int64_t r = 0; r < rounds; ++r) {
    Round& x = round[static_cast<size_t>(r)];
    x.first = simplify(threadIdx() + idxConst(r * threads), extents_);
    for (int64_t v = 0; v < V; ++v) x.copies.push_back(atAxis(sum.result, t.nAxis.var, n0 + idxConst(v)));
    Block loads;
    vectorLoads(x.copies, loads, x.cse);
    if (!loads.empty()) last.push_back(scoped(x, [&](Block& inside) { inside = std::move(loads); }));
  }
  for (Round& x : round)
    last.push_back(scoped(x, [&](Block& inside) {
      std::vector<FE> values;
      for (const loop::ExprP& c : x.copies) values.push_back(lower(c, inside, x.cse));
      std::vector<Idx> at;
      for (const loop::Axis& a : sum.parallel) at.push_back(a.var == t.nAxis.var ? shifted(n0) : var(a));
      const Idx flat = rowMajor(at, tp_.loop.buffers[static_cast<size_t>(sum.output)].shape, extents_);
      if (V == 1) inside.push_back(storeGlobal(param(sum.output, true), flat, values[0]));
      else storeVector(values, flat, inside, sum.output);
    }));
  k_.body.push_back(ifLess(idxConst(parts.parts - 2), idxVar(ticketVar, "ticket"), std::move(last)));
}

}  // namespace kiln::kernel::detail
